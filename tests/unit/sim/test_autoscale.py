"""aisched.sim.autoscale: the generated request trace, and `aisched simulate autoscale`."""

from __future__ import annotations

import json
from pathlib import Path

from aisched.cli import main
from aisched.sim.autoscale.demand import TraceModel, request_rates


def test_trace_model_is_seeded_and_diurnal() -> None:
    model = TraceModel(days=1, seed=3, bursts_per_day=0)
    rates = request_rates(model)
    assert rates == request_rates(model)
    per_hour = [sum(rates[h * 720 : (h + 1) * 720]) / 720 for h in range(24)]
    assert per_hour.index(min(per_hour)) in range(1, 6)
    assert max(per_hour) / min(per_hour) > 3


def test_simulate_autoscale_command_writes_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "autoscale.json"
    assert main(["simulate", "autoscale", "--days", "0.1", "--large-scale", "0", "--json", str(out)]) == 0
    assert set(json.loads(out.read_text())["policies"]) == {"aisched", "static_peak", "hpa_default"}
