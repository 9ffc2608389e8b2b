"""A deferred backlog on the local cluster: one pending wake-up per job, however many resyncs pass.

Thirty carbon-deferred TrainingJobs each ask to be woken at their planned start. Every
resync reconciles every job again, and each asks again: the work queue must keep one timer
per job (the earliest), never one more per pass.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisched.testing.cluster import LocalCluster, wait_for
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job

pytestmark = pytest.mark.integration
# Enough jobs that a timer leak across six resyncs shows (a hundred and more extra wake-ups); the
# work queue's one-timer-per-key rule itself is unit-tested (tests/unit/controller/test_workqueue.py).
JOBS = 30
RESYNC_SECONDS = 2
RESYNCS_WATCHED = 6


@pytest.fixture
def deferring_operator(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The session operator restarted with a forecast dirty for the next hour, resyncing every 2 s.

    Afterwards the backlog goes before the usual operator comes back: no longer deferred, its
    jobs would fill the cluster while their namespace is deleted, under later tests.
    """
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = ["time,intensity"]
    for minute in range(-5, 6 * 60):
        rows.append(f"{(now + timedelta(minutes=minute)).isoformat()},{400 if minute < 60 else 40}")
    (tmp_path / "BACKLOG.csv").write_text("\n".join(rows) + "\n")
    env = {
        "AISCHED_CARBON__PROVIDER": "file",
        "AISCHED_CARBON__FILE_PATH": str(tmp_path / "{region}.csv"),
        "AISCHED_CARBON__REGION": "BACKLOG",
        "AISCHED_RESYNC_SECONDS": str(RESYNC_SECONDS),
    }
    with operator.restarted_with(env):
        try:
            yield operator
        finally:
            deleted = cluster.kubectl("delete", "tj", "--all", "-n", namespace, "--wait=true", timeout=300)
            assert deleted.returncode == 0, deleted.stderr


def pending_wakeups(operator: OperatorProcess) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "aisched_workqueue_pending_wakeups" and sample.labels.get("kind") == "TrainingJob":
                return float(sample.value)
    return None


def phases(cluster: LocalCluster, namespace: str) -> list[str]:
    listed = cluster.kubectl("get", "tj", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return [item.get("status", {}).get("phase", "") for item in json.loads(listed.stdout)["items"]]


def deferrable(name: str) -> dict[str, Any]:
    return (
        a_training_job(name)
        .set("expectedDurationSeconds", 600)
        .set("carbon", {"deferrable": True, "maxDelaySeconds": 4 * 3600})
        .obj()
    )


def test_deferred_jobs_keep_one_timer_each_through_many_resyncs(
    cluster: LocalCluster, namespace: str, deferring_operator: OperatorProcess
) -> None:
    batch = {"apiVersion": "v1", "kind": "List", "items": [deferrable(f"b{i:04d}") for i in range(JOBS)]}
    created = cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(batch))
    assert created.returncode == 0, created.stderr
    wait_for(
        lambda: phases(cluster, namespace).count("Deferred") == JOBS, 300, f"{JOBS} jobs to be deferred", interval=2
    )
    others = json.loads(cluster.kubectl("get", "tj", "-A", "-o", "json").stdout)["items"]
    # Jobs of earlier tests may hold a timer each too (a TTL, a deadline): never more than one per job.
    ceiling = len(others)
    seen = []
    deadline = time.monotonic() + RESYNC_SECONDS * RESYNCS_WATCHED
    while time.monotonic() < deadline:
        seen.append(pending_wakeups(deferring_operator))
        time.sleep(0.5)
    assert all(value is not None and JOBS <= value <= ceiling for value in seen), (JOBS, ceiling, seen)
