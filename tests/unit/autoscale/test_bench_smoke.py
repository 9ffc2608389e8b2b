"""A tiny run of hack/bench/autoscale.py on a few hours of generated trace: it runs and writes the promised shape."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "hack" / "bench" / "autoscale.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_autoscale", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_short_run_writes_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "autoscale.json"
    assert load_bench().main(["--days", "0.25", "--large-scale", "0", "--output", str(out)]) == 0
    policies = json.loads(out.read_text())["policies"]
    assert set(policies) == {"aisched", "static_peak", "hpa_default"}
    assert policies["static_peak"]["within_target"] == 1.0
    for figures in policies.values():
        assert 0 <= figures["within_target"] <= 1
        assert figures["gpu_hours"] > 0
    # A quarter-day spans the night trough, so following demand must save GPUs.
    assert policies["aisched"]["gpu_hours"] < policies["static_peak"]["gpu_hours"]


def test_trace_model_is_seeded_and_diurnal() -> None:
    bench = load_bench()
    model = bench.TraceModel(days=1, seed=3, bursts_per_day=0)
    rates = bench.request_rates(model)
    assert rates == bench.request_rates(model)
    per_hour = [sum(rates[h * 720 : (h + 1) * 720]) / 720 for h in range(24)]
    assert per_hour.index(min(per_hour)) in range(1, 6)
    assert max(per_hour) / min(per_hour) > 3
