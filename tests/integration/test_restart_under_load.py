"""A restart on a loaded machine keeps the quota (#36): no cycle runs before every cache has listed.

Tried as a new user would, on a machine busy with other work, a restarted operator admitted a job
beside a running gang of its queue whose TrainingJob its watch had not delivered yet: 4 GPUs held
on a 2-GPU queue for minutes. Here the operator is killed while a gang runs, newcomers of the same
queue arrive while it is down, and it starts again beside CPU hogs: the queue never holds more
than its quota, and a newcomer starts once the gang's GPUs are free (so the watch below can see an
admission, and would see a wrong one).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, job, list_objects, phase_of, wait_for, wait_phase
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration]
QUOTA_GPUS = 2
NEWCOMERS = 4
# How long the restarted operator is watched: many cycles (resync 2 s), several of its relists' worth.
WATCHED_SECONDS = 30
HOGS = 2  # one per core of the machines this runs on
HOG_SECONDS = WATCHED_SECONDS + 90  # bounded: they outlive the restart and the watch, never the test run


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """Processes that keep every core busy, as the newcomer's machine was."""
    spin = f"import time\nend = time.monotonic() + {HOG_SECONDS}\nwhile time.monotonic() < end:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(HOGS)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)


def gpus_held(cluster: LocalCluster, namespace: str) -> int:
    """GPUs the namespace's workers ask, as kube-scheduler counts them, for pods not finished."""
    held = 0
    for pod in list_objects(cluster, "pods", namespace, "aisched.io/job-name"):
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            held += int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
    return held


def test_a_restart_beside_cpu_hogs_admits_nobody_beside_a_running_gang_of_a_full_queue(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess, cpu_hogs: None
) -> None:
    queue = f"full-{uuid.uuid4().hex[:6]}"
    spec = a_queue(queue, nominal_gpus=QUOTA_GPUS).obj()
    spec["spec"]["namespaces"] = [namespace]
    apply(cluster, "default", spec)
    try:
        apply(cluster, namespace, a_training_job("victim").queue(queue).gpus(QUOTA_GPUS).obj())
        try:
            wait_phase(cluster, namespace, "victim", "Running")
        except TimeoutError as e:
            raise AssertionError(f"{e}: {job(cluster, namespace, 'victim').get('status')}") from e

        operator.kill()
        for n in range(NEWCOMERS):
            apply(cluster, namespace, a_training_job(f"urgent-{n}").queue(queue).gpus(QUOTA_GPUS).obj())
        operator.start()

        end = time.monotonic() + WATCHED_SECONDS
        while time.monotonic() < end:
            held = gpus_held(cluster, namespace)
            assert held <= QUOTA_GPUS, f"{held} GPUs held on a {QUOTA_GPUS}-GPU queue:\n{operator.log_tail()}"
            time.sleep(1)
        assert phase_of(cluster, namespace, "victim") == "Running"

        # Known gap (the closing note of this change): a deleted job's terminating workers are
        # charged to no queue, so a newcomer may start while they stop; only the start is checked.
        cluster.kubectl("delete", "tj", "victim", "-n", namespace, "--wait=false")
        wait_for(
            lambda: any(phase_of(cluster, namespace, f"urgent-{n}") == "Running" for n in range(NEWCOMERS)),
            TIMEOUT * 2,  # a loaded machine: the victim's workers must go first
            "a newcomer to start once the gang's GPUs are free",
        )
    finally:
        cluster.kubectl("delete", "queue", queue, "--wait=false")
