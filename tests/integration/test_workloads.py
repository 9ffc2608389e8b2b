"""Kinds teams already run, scheduled by aisched: batch Jobs, plain pod groups and model-server
Deployments, with the chart's admission policies in force and the operator running.

A Job labelled for a queue is made suspended (the chart's MutatingAdmissionPolicy); the operator
admits it in its one cycle, beside the TrainingJobs, charged to the same quota, records where its
pods go and unsuspends it in one write; the Job controller makes its pods gated, and the operator
pins each to its node and lifts the gates of the whole gang together.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from aisched.policy.workloads.model import (
    ADMISSION_GATE,
    CHARGED_QUEUE_LABEL,
    PLACEMENT_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
)
from aisched.testing.cluster import (
    INTERRUPTION_TAINTS,
    TIMEOUT,
    LocalCluster,
    apply,
    get_object,
    list_objects,
    taint_for_interruption,
    wait_for,
    wait_phase,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator", "held_kinds")]
IMAGE = "python:3.11-slim"
KEEP_RUNNING = "aisched.io/kwok-keep-running"
FAKE_TERMINATE_AFTER = "aisched.io/fake-terminate-after"
"""The local cluster's KWOK keeps a deleted pod running this long (a long termination grace)."""


def pod_spec(gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "inf"], "resources": {"limits": limits}}],
    }


def indexed_job(name: str, queue: str, pods: int, gpus: int, priority: int | None = None) -> dict[str, Any]:
    annotations = {PRIORITY_ANNOTATION: str(priority)} if priority is not None else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}, "annotations": annotations},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            # The local cluster's KWOK plays a Job's pods as done at once, unless told to keep them running.
            "template": {"metadata": {"annotations": {KEEP_RUNNING: "true"}}, "spec": pod_spec(gpus)},
        },
    }


def pods_of(cluster: LocalCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in list_objects(cluster, "pods", namespace, selector) if not p["metadata"].get("deletionTimestamp")]


def running(pods: list[dict[str, Any]]) -> bool:
    return bool(pods) and all(p.get("status", {}).get("phase") == "Running" for p in pods)


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


def events_of(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    found = list_objects(cluster, "events", namespace, "")
    return [f"{e.get('reason')}: {e.get('message')}" for e in found if e["involvedObject"].get("name") == name]


def running_pods(cluster: LocalCluster, namespace: str, selector: str, count: int) -> list[dict[str, Any]]:
    """The COUNT pods of SELECTOR, once all of them run."""

    def all_run() -> list[dict[str, Any]] | None:
        pods = pods_of(cluster, namespace, selector)
        return pods if len(pods) == count and running(pods) else None

    return wait_for(all_run, TIMEOUT, f"the {count} pods of {selector} to run")


def job_pods_running(cluster: LocalCluster, namespace: str, name: str, count: int) -> list[dict[str, Any]]:
    return running_pods(cluster, namespace, f"batch.kubernetes.io/job-name={name}", count)


def suspended(cluster: LocalCluster, namespace: str, name: str) -> bool:
    return bool(get_object(cluster, "job", name, namespace)["spec"].get("suspend"))


def test_an_indexed_job_runs_as_one_gang_where_the_operator_placed_it(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    apply(cluster, namespace, indexed_job("gang", kinds_queue, pods=2, gpus=2))
    pods = job_pods_running(cluster, namespace, "gang", 2)
    job = get_object(cluster, "job", "gang", namespace)
    record = json.loads(job["metadata"]["annotations"][PLACEMENT_ANNOTATION])
    assert record["queue"] == kinds_queue and record["gpusPerPod"] == 2 and len(record["nodes"]) == 2
    # Each pod runs on a node of the record, pinned by the operator, its admission gate lifted.
    on = sorted(p["spec"]["nodeName"] for p in pods)
    assert on == sorted(record["nodes"])
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] == p["spec"]["nodeName"] for p in pods)
    assert not any(gated(p) for p in pods)
    assert any("Admitted" in e for e in events_of(cluster, namespace, "gang"))
    # The local cluster serves PodGroups (Kubernetes 1.37, GenericWorkload): the pods were named into one at
    # creation, which the operator made for the gang's run, so kube-scheduler bound them all or none.
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {"aisched-job-gang"}
    group = get_object(cluster, "podgroups.scheduling.k8s.io", "aisched-job-gang", namespace)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert [r["uid"] for r in group["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]


def test_one_quota_holds_across_a_trainingjob_and_jobs(cluster: LocalCluster, namespace: str, kinds_queue: str) -> None:
    """A 2-GPU TrainingJob runs in the 4-GPU queue; a 4-GPU Job waits, gated by its quota, until it goes."""
    apply(cluster, namespace, a_training_job("trainer").queue(kinds_queue).replicas(1).gpus(2).obj())
    wait_phase(cluster, namespace, "trainer", "Running")
    apply(cluster, namespace, indexed_job("big", kinds_queue, pods=2, gpus=2))
    wait_for(
        lambda: any("QuotaExceeded" in e or "quota" in e.lower() for e in events_of(cluster, namespace, "big")),
        TIMEOUT,
        "the Job to be told it waits for its quota",
    )
    assert suspended(cluster, namespace, "big")
    assert not pods_of(cluster, namespace, "batch.kubernetes.io/job-name=big")
    # A 2-GPU Job fits beside the TrainingJob.
    apply(cluster, namespace, indexed_job("small", kinds_queue, pods=1, gpus=2))
    job_pods_running(cluster, namespace, "small", 1)
    assert suspended(cluster, namespace, "big")
    cluster.kubectl("-n", namespace, "delete", "trainingjob", "trainer")
    cluster.kubectl("-n", namespace, "delete", "job", "small", "--cascade=foreground")
    job_pods_running(cluster, namespace, "big", 2)


def test_a_higher_priority_trainingjob_preempts_a_job_as_a_whole(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    apply(cluster, namespace, indexed_job("low", kinds_queue, pods=2, gpus=2, priority=0))
    job_pods_running(cluster, namespace, "low", 2)
    apply(cluster, namespace, a_training_job("urgent").queue(kinds_queue).replicas(2).gpus(2).priority(5).obj())
    wait_phase(cluster, namespace, "urgent", "Running")
    # The Job is suspended again, its record dropped; its controller deleted its pods.
    job = get_object(cluster, "job", "low", namespace)
    assert job["spec"]["suspend"] is True
    assert PLACEMENT_ANNOTATION not in (job["metadata"].get("annotations") or {})
    wait_for(
        lambda: not pods_of(cluster, namespace, "batch.kubernetes.io/job-name=low"), TIMEOUT, "the Job's pods to go"
    )


def test_a_running_job_whose_queue_label_changes_is_stopped(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    apply(cluster, namespace, indexed_job("moved", kinds_queue, pods=1, gpus=1))
    job_pods_running(cluster, namespace, "moved", 1)
    relabelled = cluster.kubectl("-n", namespace, "label", "job", "moved", f"{QUEUE_LABEL}=elsewhere", "--overwrite")
    assert relabelled.returncode == 0, relabelled.stderr
    wait_for(lambda: suspended(cluster, namespace, "moved"), TIMEOUT, "the relabelled Job to be suspended")
    wait_for(lambda: not pods_of(cluster, namespace, "batch.kubernetes.io/job-name=moved"), TIMEOUT, "its pods to go")


def test_an_unlabelled_job_is_left_alone(cluster: LocalCluster, namespace: str) -> None:
    job = indexed_job("plain", "unused", pods=1, gpus=0)
    del job["metadata"]["labels"]
    apply(cluster, namespace, job)
    pods = job_pods_running(cluster, namespace, "plain", 1)
    assert not get_object(cluster, "job", "plain", namespace)["spec"].get("suspend")
    assert not any(gated(p) for p in pods)


def group_pod(name: str, queue: str, group: str, size: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {QUEUE_LABEL: queue, POD_GROUP_LABEL: group},
            "annotations": {POD_GROUP_SIZE_ANNOTATION: str(size)},
        },
        "spec": pod_spec(gpus),
    }


def test_a_pod_group_starts_only_when_every_pod_exists(cluster: LocalCluster, namespace: str, kinds_queue: str) -> None:
    apply(cluster, namespace, group_pod("g-0", kinds_queue, "pair", 2, 1))
    first = wait_for(
        lambda: (p := pods_of(cluster, namespace, f"{POD_GROUP_LABEL}=pair")) and p, TIMEOUT, "the first pod"
    )
    assert gated(first[0])
    apply(cluster, namespace, group_pod("g-1", kinds_queue, "pair", 2, 1))
    pods = running_pods(cluster, namespace, f"{POD_GROUP_LABEL}=pair", 2)
    assert not any(gated(p) for p in pods)


def test_a_model_server_deployment_gets_as_many_replicas_as_its_quota_holds(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    labels = {"app": "vllm"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": {QUEUE_LABEL: kinds_queue}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(2) | {"restartPolicy": "Always"}},
        },
    }
    apply(cluster, namespace, deployment)

    def two_run_one_waits() -> bool:
        pods = pods_of(cluster, namespace, "app=vllm")
        runs = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return len(pods) == 3 and len(runs) == 2 and sum(gated(p) for p in pods) == 1

    wait_for(two_run_one_waits, TIMEOUT, "two replicas to run in the 4-GPU queue and the third to wait")


def test_a_statefulset_model_server_gets_each_replica_placed(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    labels = {"app": "tgi"}
    server = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "tgi", "labels": {QUEUE_LABEL: kinds_queue}},
        "spec": {
            "replicas": 2,
            "serviceName": "tgi",
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(2) | {"restartPolicy": "Always"}},
        },
    }
    apply(cluster, namespace, server)
    pods = running_pods(cluster, namespace, "app=tgi", 2)
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] == p["spec"]["nodeName"] for p in pods)


def test_a_job_on_a_node_that_announces_its_end_is_suspended_and_resumes_on_nodes_that_stay(
    cluster: LocalCluster, namespace: str, kinds_queue: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, indexed_job("spotty", kinds_queue, pods=2, gpus=1))
    first = job_pods_running(cluster, namespace, "spotty", 2)
    doomed = first[0]["spec"]["nodeName"]
    taint_for_interruption(api_client, doomed)
    try:

        def admitted_elsewhere() -> list[str] | None:
            job = get_object(cluster, "job", "spotty", namespace)
            record = (job["metadata"].get("annotations") or {}).get(PLACEMENT_ANNOTATION)
            nodes: list[str] = json.loads(record)["nodes"] if record else []
            return nodes if nodes and doomed not in nodes and not job["spec"].get("suspend") else None

        nodes = wait_for(admitted_elsewhere, TIMEOUT, "the Job admitted again off the node that ends")
        events = events_of(cluster, namespace, "spotty")
        assert any(e.startswith("NodeInterrupted") and doomed in e for e in events), events
        again = job_pods_running(cluster, namespace, "spotty", 2)
        assert {p["metadata"]["uid"] for p in again}.isdisjoint({p["metadata"]["uid"] for p in first})
        assert sorted(p["spec"]["nodeName"] for p in again) == sorted(nodes)
    finally:
        key, _ = INTERRUPTION_TAINTS["aws"]
        cluster.kubectl("taint", "node", doomed, f"{key}-")
        cluster.kubectl("uncordon", doomed)


DRAIN_SECONDS = 60


def test_a_deleted_jobs_draining_pods_stay_charged_across_an_operator_restart(
    cluster: LocalCluster, namespace: str, kinds_queue: str, operator: OperatorProcess
) -> None:
    """A Job is deleted while its pods take a long grace to stop, and the operator restarts meanwhile: it
    finds their pods and no Job, and charges them to the queue their label names (only the operator writes
    it), so a second Job of the 4-GPU queue waits for them to go instead of getting the same GPUs twice."""
    first = indexed_job("first", kinds_queue, pods=2, gpus=2)
    first["spec"]["template"]["metadata"]["annotations"][FAKE_TERMINATE_AFTER] = f"{DRAIN_SECONDS}s"
    apply(cluster, namespace, first)
    pods = job_pods_running(cluster, namespace, "first", 2)
    assert all(p["metadata"]["labels"][CHARGED_QUEUE_LABEL] == kinds_queue for p in pods), pods
    selector = "batch.kubernetes.io/job-name=first"

    def draining() -> list[dict[str, Any]]:
        found = list_objects(cluster, "pods", namespace, selector)
        return [p for p in found if p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]

    operator.stop()
    try:
        cluster.kubectl("-n", namespace, "delete", "job", "first", "--wait=false")
        wait_for(lambda: len(draining()) == 2, TIMEOUT, "the deleted Job's pods in their grace")
    finally:
        operator.start()
    apply(cluster, namespace, indexed_job("second", kinds_queue, pods=2, gpus=2))
    wait_for(
        lambda: any("quota" in e.lower() for e in events_of(cluster, namespace, "second")),
        TIMEOUT,
        "the second Job to be told it waits for its quota",
    )
    assert suspended(cluster, namespace, "second")
    assert len(draining()) == 2, "the first Job's pods went before the second was decided: no drain was tested"
    wait_for(lambda: not list_objects(cluster, "pods", namespace, selector), TIMEOUT + DRAIN_SECONDS, "them to go")
    job_pods_running(cluster, namespace, "second", 2)
