"""What the benchmarks share: where the data and the committed figures are, and how figures are written."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
MEASURED_CODE = ("operator/aisched", "benchmarks")
"""What the figures depend on: a change here since the recorded commit makes them stale."""


class InputError(Exception):
    """An input is missing or unusable; the message says which, in one line."""


def require_files(inputs: Iterable[tuple[Path, str]]) -> None:
    """InputError for the first (path, argument that sets it) whose file is not there."""
    for path, argument in inputs:
        if not path.is_file():
            raise InputError(f"{path}: no such file (set it with {argument})")


def add_output_arguments(parser: argparse.ArgumentParser, results_name: str) -> None:
    parser.add_argument("--output", type=Path, help="write the figures here as JSON")
    parser.add_argument(
        "--update-results",
        action="store_true",
        help=f"write them into benchmarks/results/{results_name} too: the committed figures",
    )


def write_figures(figures: dict[str, Any], output: Path | None, update_results: bool, results_name: str) -> None:
    """Write FIGURES to OUTPUT and, when asked, over the committed results; say where.

    Every file written carries the commit and code that produced it (`provenance`), whether or not
    its benchmark recorded one: a figure whose code cannot be named cannot be re-run."""
    if "provenance" not in figures:
        figures = {**figures, "provenance": provenance()}
    targets = [output] if output is not None else []
    if update_results:
        targets.append(RESULTS_DIR / results_name)
    for path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"wrote {path}")


def provenance(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit that produced the figures, and whether the measured code differed from it (dirty)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=all", "--", *MEASURED_CODE)
    paths = sorted(line[3:] for line in changed.splitlines() if line[3:].endswith(".py"))
    digest = hashlib.sha256()
    for path in sorted(p for top in MEASURED_CODE for p in (root / top).rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {
        "commit": git("rev-parse", "HEAD").strip() or None,
        "dirty": bool(paths),
        "dirty_paths": paths,
        "measured_code_sha256": digest.hexdigest(),
    }


def run_reporting_input_errors(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """RUN(ARGS), with an input error told in one line (no traceback) and exit status 2."""
    try:
        return run(args)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
