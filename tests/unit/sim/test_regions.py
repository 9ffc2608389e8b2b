"""`aisched simulate regions`: one queue over several regions, every policy under the same rules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aisched.cli import main
from aisched.policy.carbon import Forecast
from aisched.policy.regions import RegionSettings
from aisched.sim.carbon.grid import Grid, View
from aisched.sim.regions.engine import Costs, Simulation
from aisched.sim.regions.jobs import RegionalJob
from aisched.sim.regions.policies import Aisched, CheapestFirst, FirstToAdmit, LowestIntensity, TimeOnly
from aisched.sim.regions.world import Region
from aisched.sim.spot.traces import SpotTrace
from tests.unit.sim.generated import write_grid_intensity, write_philly_trace, write_spot_trace

POLICIES = ("time_only", "cheapest_first", "lowest_intensity", "first_to_admit", "aisched")
COSTS = Costs(power_per_gpu_w=300.0, checkpoint_s=1800.0, restore_s=300.0, data_move_cost=2.0)


def write_scaled_grid(source: Path, path: Path, factor: float) -> None:
    lines = source.read_text().splitlines()
    rows = [f"{t},{float(v) * factor:.2f}" for t, v in (line.split(",") for line in lines[1:])]
    path.write_text("\n".join([lines[0], *rows]) + "\n")


def write_inputs(tmp_path: Path) -> list[str]:
    write_grid_intensity(tmp_path / "gb.csv")
    write_scaled_grid(tmp_path / "gb.csv", tmp_path / "fr.csv", 0.25)
    write_philly_trace(tmp_path / "philly.csv")
    arguments = ["--trace", str(tmp_path / "philly.csv"), "--start", "2020-01-06"]
    for name, grid, availability in (("gb-a", "gb", 0.9), ("fr-a", "fr", 0.6)):
        write_spot_trace(tmp_path / f"{name}.json", availability, samples=8000)
        arguments += ["--region", f"{name}={tmp_path / f'{grid}.csv'},{tmp_path / f'{name}.json'}"]
    return arguments


def test_simulate_regions_writes_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "regions.json"
    assert main(["simulate", "regions", *write_inputs(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["baseline_at_arrival_co2_g"] > 0
    assert set(report["policies"]) == set(POLICIES)
    for figures in report["policies"].values():
        assert {"co2_g", "cost", "deadline_misses", "avg_jct_s"} <= figures.keys()
        assert figures["avg_jct_s"] > 0 and figures["cost"] > 0
    assert report["policies"]["time_only"]["jobs_away_from_home"] == 0
    # The FR grid is a quarter of GB's: every policy that looks at carbon emits less than one that does not.
    policies = report["policies"]
    assert policies["lowest_intensity"]["co2_g"] < policies["first_to_admit"]["co2_g"]
    assert policies["aisched"]["co2_g"] < policies["first_to_admit"]["co2_g"]


def test_a_price_for_no_region_is_told_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = [*write_inputs(tmp_path), "--price-premium", "nowhere=0.1"]
    assert main(["simulate", "regions", *arguments]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "nowhere" in error and error.count("\n") == 1


def region(name: str, value: float, spot: list[int], gpus: int = 4) -> Region:
    start = datetime(2020, 1, 6, tzinfo=UTC)
    grid = Grid.from_forecast(Forecast(name, start, timedelta(hours=1), (value,) * 200))
    trace = SpotTrace.build(name, 600.0, spot)
    return Region.build(
        name, grid, View(grid, grid.actual), trace, spot_origin=0.0, gpus=gpus, on_demand_price=3.0, spot_price=1.0
    )


def test_a_preempted_spot_run_keeps_its_checkpoints_and_resumes() -> None:
    # Spot for the first 4,200 s (7 samples of 600 s), then none: a 2-hour job on spot loses it at 4,200 s.
    only = region("gb", 100.0, [1] * 7 + [0] * 100)
    job = RegionalJob(0, 0.0, 7200.0, 1, "gb", None)
    (state,) = Simulation([only], [job], CheapestFirst(), COSTS).run()
    assert state.preemptions == 1
    # 4,200 s worked, 3,600 s of it checkpointed: 3,600 s left, plus 300 s restoring, on-demand.
    assert state.finished == 4200.0 + 300.0 + 3600.0
    assert abs(state.cost - (4200 / 3600 * 1.0 + 3900 / 3600 * 3.0)) < 1e-9
    assert state.spot_gpu_s == 4200.0


def test_each_policy_goes_where_its_authors_send_it() -> None:
    dirty, clean = region("gb", 400.0, [0] * 100), region("fr", 50.0, [1] * 100)
    job = RegionalJob(0, 0.0, 7200.0, 1, "gb", None)
    where = {}
    for policy in (FirstToAdmit(), CheapestFirst(), LowestIntensity(), TimeOnly(0.0), Aisched(RegionSettings())):
        (state,) = Simulation([dirty, clean], [job], policy, COSTS).run()
        where[policy.name] = set(state.gpu_s_by_region)
    assert where["first_to_admit"] == {"gb"}  # the first worker in order admits it
    assert where["time_only"] == {"gb"}  # its home
    assert where["lowest_intensity"] == {"fr"}
    assert where["cheapest_first"] == {"fr"}  # spot there: $2 + $2 to move the data, against $6 at home
    assert where["aisched"] == {"fr"}


def test_a_full_region_makes_a_gang_wait_and_no_policy_overfills_one() -> None:
    small = region("gb", 100.0, [0] * 100, gpus=2)
    jobs = [RegionalJob(i, 0.0, 3600.0, 2, "gb", None) for i in range(3)]
    states = Simulation([small], jobs, FirstToAdmit(), COSTS).run()
    assert sorted(s.finished or 0.0 for s in states) == [3600.0, 7200.0, 10800.0]
