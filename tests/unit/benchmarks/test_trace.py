"""benchmarks/trace.py: a tiny run writes both traces' figures where asked; a missing trace is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import trace


def write_tiny_traces(directory: Path) -> tuple[Path, Path]:
    philly, alibaba = directory / "philly.csv", directory / "openb_pod_list_multigpu50.csv"
    rows = "".join(f"2017-10-01 10:{i // 60:02d}:{i % 60:02d},{300 + 7 * i}.0,{[1, 2, 8][i % 3]}\n" for i in range(90))
    philly.write_text("timestamp,duration,num_gpus\n" + rows)
    pods = "".join(f"p{i},1000,1024,{[1, 2, 4, 8][i % 4]},1000\n" for i in range(30))
    alibaba.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + pods)
    return philly, alibaba


def test_a_tiny_run_writes_both_traces_figures_in_the_output_dir(tmp_path: Path) -> None:
    philly, alibaba = write_tiny_traces(tmp_path)
    out = tmp_path / "out"
    assert trace.main(["--philly", str(philly), "--alibaba", str(alibaba), "--output-dir", str(out)]) == 0
    for name, jobs in (("trace_philly.json", 90 - trace.PHILLY_RAMP), ("trace_alibaba.json", 30)):
        figures = json.loads((out / name).read_text())
        assert figures["jobs"] == jobs
        assert set(figures["policies"]) == {"aisched", "fifo_first_fit", "fifo_spread"}


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert trace.main(["--data-dir", str(tmp_path)]) == 2
    missing = tmp_path / trace.PHILLY
    assert capsys.readouterr().err == f"error: {missing}: no such file (set it with --philly or --data-dir)\n"
