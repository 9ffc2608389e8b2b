"""Run every benchmark with its default arguments, each in its own process; `make bench` calls this.

Each prints its figures; with `--update-results` each also writes them over its committed
file in benchmarks/results/. Name some (`python -m benchmarks.run_all placement trace`, or
BENCH_ONLY="placement trace") to run just those. A new benchmark goes into BENCHMARKS with
defaults that take minutes, not hours, on a small machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from benchmarks.common import REPO_ROOT

BENCHMARKS = (
    "autoscale",
    "carbon",
    "e2e_scale",
    "fleet",
    "gpu_sharing",
    "placement",
    "regions",
    "scale",
    "serving",
    "spot",
    "tenant_objects",
    "tenant_records",
    "tenants",
    "trace",
    "workloads",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"of {', '.join(BENCHMARKS)} (default: BENCH_ONLY, else all)"
    )
    parser.add_argument("--update-results", action="store_true", help="each writes over its committed figures")
    args = parser.parse_args(argv)
    names = args.names or os.environ.get("BENCH_ONLY", "").split() or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"error: no benchmark {', '.join(unknown)} (there are {', '.join(BENCHMARKS)})", file=sys.stderr)
        return 2
    failed = []
    for name in (name for name in BENCHMARKS if name in names):
        print(f"== {name}", flush=True)
        command = [sys.executable, "-m", f"benchmarks.{name}", *(["--update-results"] if args.update_results else [])]
        if subprocess.run(command, cwd=REPO_ROOT, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
