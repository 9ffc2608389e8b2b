"""A placement is the operator's record, never a grant: made by this process, or sat on by the gang."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from aisched.api import TrainingJob
from aisched.api.training_job import Placement, TrainingJobStatus
from aisched.policy.placement_record import (
    PLACEMENT_NOT_VERIFIED,
    PlacementMade,
    WorkerSeat,
    placement_ignored,
    placement_vouched_for,
)
from tests.builders import a_training_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def placed_on(*nodes: str, generation: int = 2) -> TrainingJobStatus:
    return TrainingJobStatus(
        phase="Placing", gang_generation=generation, placement=Placement(nodes=list(nodes)), gpus=8
    )


def test_a_placement_this_process_wrote_is_vouched_for_before_any_worker_exists() -> None:
    status = placed_on("n1", "n2")
    assert placement_vouched_for(status, PlacementMade(2, ("n1", "n2")), [])
    assert placement_vouched_for(TrainingJobStatus(phase="Queued"), None, [])


def test_a_placement_nobody_made_is_not() -> None:
    """Written by someone who may write the status: no memory of it, and no worker sits on it."""
    status = placed_on("n1", "n2")
    assert not placement_vouched_for(status, None, [])
    assert not placement_vouched_for(status, PlacementMade(2, ("n3", "n4")), [])
    assert not placement_vouched_for(status, PlacementMade(1, ("n1", "n2")), [])


def test_after_a_restart_the_current_gangs_workers_vouch_for_where_they_sit() -> None:
    status = placed_on("n1", "n2")
    assert placement_vouched_for(status, None, [WorkerSeat("2", "0", "n1")])  # the rest not created yet
    assert placement_vouched_for(status, None, [WorkerSeat("2", "0", "n1"), WorkerSeat("2", "1", "n2")])
    # A worker elsewhere than its rank's node, or an older gang's only, vouches for nothing.
    assert not placement_vouched_for(status, None, [WorkerSeat("2", "0", "n1"), WorkerSeat("2", "1", "n9")])
    assert not placement_vouched_for(status, None, [WorkerSeat("1", "0", "n1")])
    assert not placement_vouched_for(status, None, [WorkerSeat("2", "7", "n1"), WorkerSeat("2", None, "n1")])


@given(
    nodes=st.lists(st.sampled_from(["n1", "n2", "n3"]), min_size=1, max_size=4),
    seats=st.lists(
        st.builds(
            WorkerSeat,
            st.sampled_from(["1", "2", None]),
            st.one_of(st.none(), st.sampled_from(["0", "1", "2", "3", "x", "-1"])),
            st.sampled_from(["n1", "n2", "n3", None]),
        ),
        max_size=5,
    ),
)
def test_workers_vouch_only_for_the_nodes_their_ranks_sit_on(nodes: list[str], seats: list[WorkerSeat]) -> None:
    vouched = placement_vouched_for(placed_on(*nodes), None, seats)
    current = [s for s in seats if s.gang_generation == "2"]
    sitting = all(
        s.rank is not None and s.rank.isdigit() and int(s.rank) < len(nodes) and nodes[int(s.rank)] == s.node
        for s in current
    )
    assert vouched == (bool(current) and sitting)


def test_an_ignored_placement_leaves_the_job_waiting_with_no_gpus_and_says_why() -> None:
    job = TrainingJob.model_validate({**a_training_job("j").obj(), "status": placed_on("n1").to_wire()})
    status = placement_ignored(job, T0)
    assert (status.phase, status.reason, status.placement, status.gpus) == ("Queued", PLACEMENT_NOT_VERIFIED, None, 0)
    admitted = next(c for c in status.conditions if c.type == "Admitted")
    assert (admitted.status, admitted.reason) == ("False", PLACEMENT_NOT_VERIFIED)
