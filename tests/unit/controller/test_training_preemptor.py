"""A preemptor's workers wait for their victims to go, checkpoint grace included, before a bind failure counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aisched.controller.cluster_state import ClusterState
from aisched.controller.training import TrainingJobController
from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.policy.deadlines import checkpoint_grace_seconds
from aisched.settings import Settings
from tests.builders import a_queue, a_training_job
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import an_open_default_queue

pytestmark = pytest.mark.asyncio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "preemptor")


def a_pod(name: str, job: str, *, deleted: bool = False, unschedulable: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": "ns",
        "name": name,
        "labels": {labels.JOB_NAME: job, labels.JOB_KIND: "TrainingJob", labels.RANK: "0", labels.GANG_GENERATION: "1"},
    }
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}
    status: dict[str, Any] = {"phase": "Running"}
    if deleted:
        metadata["deletionTimestamp"] = (T0 + timedelta(seconds=110)).isoformat()
        spec["nodeName"] = "n1"
    if unschedulable:
        spec["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": T0.isoformat(),
                }
            ],
        }
    return {"metadata": metadata, "spec": spec, "status": status}


def a_controller(kube: KubeDouble, now: list[datetime], *, victim_leaving: bool) -> TrainingJobController:
    settings = Settings()
    controller = TrainingJobController(settings, kube.client, ClusterState(Inventory(settings)), clock=lambda: now[0])
    node = {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    controller.inventory.upsert_node(node)
    job = a_training_job("preemptor").namespace("ns").gpus(8).obj()
    job["status"] = {"phase": "Placing", "gangGeneration": 1, "replicas": 1, "placement": {"nodes": ["n1"]}}
    controller.job_seen(job)
    controller.inventory.upsert_pod(a_pod("preemptor-g1-w0", "preemptor", unschedulable=True))
    if victim_leaving:
        controller.inventory.upsert_pod(a_pod("victim-g1-w0", "victim", deleted=True))
    return controller


@pytest.mark.parametrize("victim_leaving", [True, False], ids=["victim-saving", "no-victim"])
async def test_a_preemptor_waits_out_its_victims_checkpoint_grace(kube: KubeDouble, victim_leaving: bool) -> None:
    kube.allow("patch_status", "post_event", "delete_pod")
    now = [T0 + timedelta(seconds=61)]
    controller = a_controller(kube, now, victim_leaving=victim_leaving)
    await controller.reconcile(KEY)
    phase = controller.jobs[KEY]["status"]["phase"]
    assert phase == ("Placing" if victim_leaving else "Restarting")  # a bind failure only without a victim
    if victim_leaving:
        now[0] = T0 + timedelta(seconds=61 + checkpoint_grace_seconds(Settings().spot_notice_seconds))
        await controller.reconcile(KEY)
        assert controller.jobs[KEY]["status"]["reason"] == "BindFailed"  # it has had its grace: a real failure


async def test_a_preempted_job_is_placed_again_only_once_its_last_gang_has_stopped(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create", "release_report_finalizer")
    now = [T0]
    settings = Settings()
    controller = TrainingJobController(settings, kube.client, ClusterState(Inventory(settings)), clock=lambda: now[0])
    controller.queue_seen(an_open_default_queue())
    for name in ("n1", "n2"):
        controller.inventory.upsert_node(
            {
                "metadata": {"name": name},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    job = a_training_job("victim").namespace("ns").gpus(8).obj()
    job["metadata"]["uid"] = "uid-victim"
    job["status"] = {"phase": "Queued", "reason": "Preempted", "gangGeneration": 1, "replicas": 1}
    controller.job_seen(job)
    saving = a_pod("victim-g1-w0", "victim", deleted=True)  # still checkpointing on n1; n2 is free
    controller.inventory.upsert_pod(saving)
    await controller.schedule()
    assert controller.jobs[("ns", "victim")]["status"]["phase"] == "Queued"
    controller.inventory.delete_pod("ns", "victim-g1-w0")
    await controller.schedule()
    assert controller.jobs[("ns", "victim")]["status"]["phase"] == "Placing"


async def test_a_deleted_jobs_stopping_workers_stay_charged_to_their_queue(kube: KubeDouble) -> None:
    """Delete and submit again (#37): while the deleted job's 8-GPU worker still stops, the 8-GPU queue
    it was charged to has no room for the new job, though a node of 8 free GPUs waits beside it."""
    kube.allow("patch_status", "post_event", "create", "release_report_finalizer")
    settings = Settings()
    controller = TrainingJobController(settings, kube.client, ClusterState(Inventory(settings)), clock=lambda: T0)
    queue = a_queue("team", nominal_gpus=8).obj()
    controller.queue_seen(queue)
    for name in ("n1", "n2"):
        controller.inventory.upsert_node(
            {
                "metadata": {"name": name},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    stopping = a_pod("old-g1-w0", "old", deleted=True)  # its job is gone; its grace runs on n1
    stopping["metadata"]["annotations"] = {labels.QUEUE_ANNOTATION: "team"}
    controller.inventory.upsert_pod(stopping)
    job = a_training_job("again").namespace("ns").queue("team").gpus(8).obj()
    job["metadata"]["uid"] = "uid-again"
    controller.job_seen(job)
    await controller.schedule()
    assert controller.jobs[("ns", "again")]["status"]["phase"] == "Queued"
    controller.inventory.delete_pod("ns", "old-g1-w0")
    await controller.schedule()
    assert controller.jobs[("ns", "again")]["status"]["phase"] == "Placing"
