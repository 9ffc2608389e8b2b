"""Kill at each write of the workload executor: a Job's admission, from its record to its last gate.

The writes of one Indexed Job's path: the patch that records its placement and unsuspends it, then
one patch per pod that pins it and lifts its gate. The operator ends before each in turn; the next
one, started at once, must bring the Job to where it would have been: its pods running on the nodes
of one record, each index once, nothing admitted twice.
"""

from __future__ import annotations

import json
from typing import Any

from aisched.policy.workloads.model import PLACEMENT_ANNOTATION
from aisched.testing.cluster import get_object
from aisched.testing.workload_policies import workload_policies
from tests.builders import a_queue
from tests.integration.test_kill_at_write import (  # noqa: F401  (its fixtures and marks, by name)
    KillPoints,
    each_kill_point,
    in_process,
    kill_points,
    pytestmark,
)
from tests.integration.test_workloads import indexed_job, pods_of, running


def test_a_jobs_admission_killed_at_any_write_runs_one_gang_where_its_record_says(
    kill_points: KillPoints,  # noqa: F811
) -> None:
    cluster = kill_points.cluster
    policies: list[Any] = []

    def prepare(namespace: str) -> str:
        queue = f"q-{namespace}"
        obj = a_queue(queue, nominal_gpus=4).obj()
        obj["spec"]["namespaces"] = [namespace]
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
        kill_points.queues.append(queue)
        held = workload_policies(cluster, namespace)
        held.__enter__()
        policies.append(held)
        return queue

    def act(namespace: str, queue: str) -> None:
        cluster.kubectl(
            "-n", namespace, "apply", "-f", "-", input=json.dumps(indexed_job("gang", queue, pods=2, gpus=2))
        )

    def done(namespace: str, _queue: str) -> bool:
        pods = pods_of(cluster, namespace, "batch.kubernetes.io/job-name=gang")
        if len(pods) != 2 or not running(pods):
            return False
        job = get_object(cluster, "job", "gang", namespace)
        record = json.loads(job["metadata"]["annotations"][PLACEMENT_ANNOTATION])
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(record["nodes"]), (record, pods)
        indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
        assert indexes == ["0", "1"]
        assert record["generation"] == 1, record  # admitted once, whatever write the kill came before
        return True

    try:
        points = each_kill_point(kill_points, prepare, act, done)
    finally:
        for held in policies:
            held.__exit__(None, None, None)
    assert points >= 3, f"an admission records, then places and ungates each pod: only {points} writes seen"
