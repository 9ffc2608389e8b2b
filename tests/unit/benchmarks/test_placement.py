"""benchmarks/placement.py: the indexed placement agrees with its naive baseline on every gang size."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import placement


def test_placement_benchmark_agrees_with_its_naive_baseline(tmp_path: Path) -> None:
    output = tmp_path / "placement.json"
    assert placement.main(["--nodes", "96", "--repeat", "20", "--naive-repeat", "2", "--output", str(output)]) == 0
    results = json.loads(output.read_text())["results"]
    assert [r["gang_gpus"] for r in results] == [1, 2, 4, 8, 16, 32, 64, 128]
