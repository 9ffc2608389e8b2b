"""The GPU-sharing arrival simulation: its workload, its accounting and its curve."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisched.policy.sharing.model import MILLI, NodeSpec, Task
from aisched.sim.sharing import arrivals, read_nodes, read_tasks, simulate

NODES = [NodeSpec(f"n{i}", 64_000, 512, gpus, "A") for i, gpus in enumerate([8, 8, 4, 2, 2])]
TASKS = [Task(2_000, 8, 1, milli) for milli in (250, 500, 700, 1000, 300)] + [
    Task(4_000, 16, 4, MILLI),
    Task(1_000, 4, 0, 0),
]


def test_arrivals_are_the_trace_reordered_then_draws_until_the_load_is_reached() -> None:
    capacity = 24 * MILLI
    order = arrivals(TASKS, capacity, 1.3, seed=5)
    assert sorted(map(repr, order[: len(TASKS)])) == sorted(map(repr, TASKS))
    asked = sum(task.demand_milli for task in order)
    assert asked >= 1.3 * capacity
    assert asked - order[-1].demand_milli < 1.3 * capacity
    assert order == arrivals(TASKS, capacity, 1.3, seed=5)
    assert order != arrivals(TASKS, capacity, 1.3, seed=6)


def test_a_workload_without_gpu_tasks_is_refused() -> None:
    with pytest.raises(ValueError, match="no task asks for a GPU"):
        arrivals([Task(1, 1, 0, 0)], MILLI, 1.0, seed=0)


@pytest.mark.parametrize("policy", ["aisched", "fgd", "best_fit", "random_fit"])
def test_the_curve_never_allocates_more_than_arrived_nor_more_than_capacity(policy: str) -> None:
    run = simulate(NODES, TASKS, policy, seed=3, max_load=1.5, step=0.1)
    loads = [load for load, _, _ in run.curve]
    assert loads == sorted(loads) and loads[0] == 0.0 and loads[-1] == pytest.approx(1.5)
    for load, allocated, stranded in run.curve:
        assert 0.0 <= stranded <= 1.0 - allocated + 1e-9
        assert allocated <= min(load, 1.0) + 1e-9
    shares = [allocated for _, allocated, _ in run.curve]
    assert shares == sorted(shares)  # nothing leaves
    assert 0.0 <= run.unallocated_at_full_load <= 1.0
    assert run.refused_tasks <= run.arrived_tasks


def test_readers_take_the_alibaba_columns(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nx,64000,1024,2,T4\n")
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,10,1,460,T4|V100\nb,500,5,0,0,\n"
    )
    assert read_nodes(tmp_path / "nodes.csv") == [NodeSpec("x", 64000, 1024, 2, "T4")]
    assert read_tasks(tmp_path / "pods.csv") == [Task(1000, 10, 1, 460, frozenset({"T4", "V100"})), Task(500, 5, 0, 0)]
