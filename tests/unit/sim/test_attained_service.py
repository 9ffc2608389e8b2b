"""The simulator counts a gang's attained service by the operator's own rule, to the same figure."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from aisched.api.training_job import TrainingJobPhase, TrainingJobStatus
from aisched.policy.cluster import DomainId
from aisched.policy.job_status import attained_after_run as status_attained_after_run
from aisched.policy.placement import Placement
from aisched.policy.scheduler import JobRequest
from aisched.sim.jobs import at
from aisched.sim.policies import attained_after_run
from tests.levels import RACK


def test_a_simulated_run_adds_the_same_gpu_seconds_the_operator_writes_to_status() -> None:
    placement = Placement(nodes=("n1", "n2"), gpus_per_replica=4, domain=DomainId(RACK, ("z1", "r1")))
    request = JobRequest(
        key="ns/a", queue="default", priority=0, created=at(0.0), gpus_per_replica=4, replicas=2, placement=placement
    )
    request = replace(request, started=at(1000.0), attained_gpu_seconds=250.0)
    status = TrainingJobStatus(
        phase=TrainingJobPhase.RUNNING, gpus=8, run_start_time=at(1000.0), attained_gpu_seconds=250.0
    )
    now = 1000.0 + timedelta(minutes=30).total_seconds()
    assert attained_after_run(request, now) == status_attained_after_run(status, at(now)) == 250.0 + 8 * 1800
