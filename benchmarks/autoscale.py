"""Autoscaling benchmark: time within the latency target and GPU-hours on a bursty diurnal trace.

The trace model, the cluster and the policies (aisched, the HPA's defaults, static peak
provisioning) are aisched.sim.autoscale's (see its docstring); the trace is generated
(seeded), so this benchmark reads no data. It adds the targets aisched is judged by.

Usage: .venv/bin/python -m benchmarks.autoscale [--days 14] [--seed 7] [--startup 120] ...
       [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from aisched.sim.autoscale.command import add_model_arguments, simulate_scenarios
from benchmarks.common import add_output_arguments, write_figures


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_model_arguments(parser)
    add_output_arguments(parser, "autoscale.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    results = simulate_scenarios(args)
    results["targets"] = {"within_target_at_least": 0.99, "gpu_hours_saved_vs_static_peak_at_least": 0.30}
    results["wall_seconds"] = round(time.perf_counter() - began, 2)
    write_figures(results, args.output, args.update_results, "autoscale.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
