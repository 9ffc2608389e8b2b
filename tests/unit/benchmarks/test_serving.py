"""benchmarks/serving.py on two small generated traces: it runs, writes the promised keys, judges the target."""

from __future__ import annotations

import json
import random
from pathlib import Path

from benchmarks import serving

ARMS = {"aisched", "hpa", "keda", "aibrix_kpa", "saturation", "static_peak"}


def write_trace(path: Path, seconds: int, rate: float, seed: int) -> Path:
    """An Azure-format trace with a burst in its second half."""
    rng = random.Random(seed)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 0.0
    while t < seconds:
        t += rng.expovariate(rate * (3 if t > seconds / 2 else 1))
        minutes, rest = divmod(t, 60)
        lines.append(f"2023-11-16 18:{int(minutes):02d}:{rest:010.7f},{rng.randint(50, 800)},{rng.randint(1, 60)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_short_run_writes_every_arm_and_the_target(tmp_path: Path) -> None:
    code = write_trace(tmp_path / "code.csv", 240, 1.0, seed=1)
    conv = write_trace(tmp_path / "conv.csv", 240, 1.5, seed=2)
    out = tmp_path / "serving.json"
    args = ["--code", str(code), "--conv", str(conv), "--scale", "2", "--tune-minutes", "2", "--hours", "0.05"]
    small = ["--max-replicas", "4", "--load-time", "30", "--load-test-seconds", "30"]
    assert serving.main([*args, *small, "--output", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["policies"]) == ARMS == set(figures["knew"])
    for arm in figures["policies"].values():
        assert 0 <= arm["slo_attainment"] <= 1 and arm["gpu_hours"] > 0
    assert isinstance(figures["targets"]["met"], bool)
    assert figures["calibration_check"]["simulated_output_tokens_per_s"] > 0


def test_target_is_judged_against_the_cheapest_peer_at_99_percent() -> None:
    policies = {
        "aisched": {"slo_attainment": 0.995, "gpu_hours": 7.0},
        "hpa": {"slo_attainment": 0.992, "gpu_hours": 10.0},
        "static_peak": {"slo_attainment": 1.0, "gpu_hours": 20.0},
        "keda": {"slo_attainment": 0.9, "gpu_hours": 5.0},
    }
    judged = serving.judge(policies)
    assert judged["cheapest_peer_at_target"] == "hpa" and judged["met"] is True
    policies["aisched"]["gpu_hours"] = 8.5
    assert serving.judge(policies)["met"] is False


def test_missing_trace_is_an_input_error(tmp_path: Path) -> None:
    assert serving.main(["--code", str(tmp_path / "none.csv"), "--conv", str(tmp_path / "none.csv")]) == 2
