"""InferenceService objects: replica pods, the Service in front, and reading pods back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.kube.serving_builders import (
    CAPACITY_TYPE,
    SERVICE_NAME,
    TEMPLATE_HASH,
    ReplicaSlot,
    build_replica_pod,
    build_service,
    free_pod_names,
    replica_pod_name,
    service_selector,
    serving_pod_from_object,
    template_hash,
)
from tests.builders import an_inference_service


def _service(**changes: object) -> InferenceService:
    builder = an_inference_service("chat").namespace("ml").set("gpusPerReplica", 2).set("port", 8000)
    for path, value in changes.items():
        builder.set(path, value)
    obj = builder.obj()
    obj["metadata"]["uid"] = "uid-7"
    return InferenceService.model_validate(obj)


def _slot(capacity: CapacityType = CapacityType.ON_DEMAND, node: str = "h100-1") -> ReplicaSlot:
    return ReplicaSlot(name="chat-abc-0", node=node, capacity_type=capacity, template_hash="abc")


def _selector_labels(selector: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in selector.split(","))


def test_a_replica_is_pinned_to_its_node_with_its_gpus_and_owned() -> None:
    pod = build_replica_pod(_service(), _slot())
    assert pod["metadata"]["name"] == "chat-abc-0"
    assert pod["metadata"]["namespace"] == "ml"
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "h100-1"
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 2
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-7"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    labels = pod["metadata"]["labels"]
    assert (labels[SERVICE_NAME], labels[TEMPLATE_HASH], labels[CAPACITY_TYPE]) == ("chat", "abc", "OnDemand")
    # Model servers restart in place; no gang semantics here.
    assert "restartPolicy" not in pod["spec"] and "schedulingGates" not in pod["spec"]


def test_template_labels_node_selector_and_gpus_survive() -> None:
    template: dict[str, Any] = {
        "metadata": {"labels": {"team": "search"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"disk": "nvme"},
            "containers": [
                {"name": "sidecar", "image": "envoy"},
                {"name": "server", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            ],
        },
    }
    pod = build_replica_pod(_service(template=template), _slot())
    assert pod["metadata"]["labels"]["team"] == "search"
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["spec"]["nodeSelector"] == {"disk": "nvme", "kubernetes.io/hostname": "h100-1"}
    assert "resources" not in pod["spec"]["containers"][0]


def test_spot_replicas_stop_within_the_notice_and_on_demand_ones_keep_their_grace() -> None:
    template = {"spec": {"terminationGracePeriodSeconds": 300, "containers": [{"name": "s", "image": "i"}]}}
    spot = build_replica_pod(_service(template=template), _slot(CapacityType.SPOT), spot_grace_seconds=110)
    on_demand = build_replica_pod(_service(template=template), _slot(), spot_grace_seconds=110)
    assert spot["spec"]["terminationGracePeriodSeconds"] == 110
    assert spot["metadata"]["labels"][CAPACITY_TYPE] == "Spot"
    assert on_demand["spec"]["terminationGracePeriodSeconds"] == 300


def test_building_leaves_the_service_template_alone() -> None:
    service = _service()
    build_replica_pod(service, _slot())
    assert "resources" not in service.spec.template["spec"]["containers"][0]


def test_the_service_selects_every_replica_but_only_ready_ones_get_traffic() -> None:
    service = _service()
    svc = build_service(service)
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["publishNotReadyAddresses"] is False
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-7"
    old = build_replica_pod(service, _slot())
    new = build_replica_pod(service, ReplicaSlot("chat-def-0", "a100-1", CapacityType.SPOT, "def"))
    for pod in (old, new):  # both templates serve during a rollout
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_the_status_selector_matches_the_replicas() -> None:
    pod = build_replica_pod(_service(), _slot())
    assert _selector_labels(service_selector("chat")).items() <= pod["metadata"]["labels"].items()


def test_template_hash_follows_what_shapes_a_pod_and_nothing_else() -> None:
    base = template_hash(_service())
    assert template_hash(_service()) == base
    assert template_hash(_service(replicas=5, port=9000)) == base
    assert template_hash(_service(autoscaling={"metric": {"targetPerReplica": 3}})) == base
    assert template_hash(_service(gpusPerReplica=4)) != base
    assert template_hash(_service(gpuType="NVIDIA-L4")) != base
    changed = {"spec": {"containers": [{"name": "trainer", "image": "python:3.12-slim"}]}}
    assert template_hash(_service(template=changed)) != base
    assert len(base) == 10 and base.isalnum()


def test_free_pod_names_fill_gaps_lowest_first() -> None:
    taken = {replica_pod_name("chat", "abc", i) for i in (0, 2)}
    assert free_pod_names("chat", "abc", taken, 3) == ["chat-abc-1", "chat-abc-3", "chat-abc-4"]
    assert free_pod_names("chat", "abc", taken, 0) == []


def _as_seen(pod: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "nodeName": status.pop("node", None)}, "status": status}


def test_reading_a_replica_back() -> None:
    pod = build_replica_pod(_service(), _slot(CapacityType.SPOT))
    fresh = serving_pod_from_object(pod)
    assert fresh is not None
    assert (fresh.service, fresh.template_hash, fresh.capacity_type) == ("chat", "abc", CapacityType.SPOT)
    assert (fresh.pinned_node, fresh.node, fresh.phase, fresh.ready, fresh.gpus) == (
        "h100-1",
        None,
        "Pending",
        False,
        2,
    )
    assert fresh.serving_candidate
    ready = serving_pod_from_object(
        _as_seen(pod, node="h100-1", phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    )
    assert ready is not None and ready.ready and ready.node == "h100-1"
    versioned = serving_pod_from_object({**pod, "metadata": {**pod["metadata"], "resourceVersion": "4711"}})
    assert versioned is not None and versioned.resource_version == "4711" and fresh.resource_version == ""


def test_reading_pods_that_are_no_replicas_any_more() -> None:
    pod = build_replica_pod(_service(), _slot())
    failed = serving_pod_from_object(_as_seen(pod, node="h100-1", phase="Failed"))
    assert failed is not None and failed.finished and not failed.serving_candidate
    deleting = serving_pod_from_object(
        {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    assert deleting is not None and deleting.terminating and not deleting.serving_candidate
    stuck = serving_pod_from_object(
        _as_seen(
            pod,
            phase="Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        )
    )
    assert stuck is not None and stuck.unschedulable_since == datetime(2026, 1, 1, tzinfo=UTC)


def test_pods_of_others_are_not_replicas() -> None:
    worker = {"metadata": {"name": "w", "namespace": "ml", "labels": {"aisched.io/kind": "TrainingJob"}}, "spec": {}}
    plain = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {}}
    assert serving_pod_from_object(worker) is None
    assert serving_pod_from_object(plain) is None


def test_a_template_stored_before_the_reserved_key_rule_passes_none_of_the_operators_keys_on() -> None:
    service = _service()
    service.spec.template["metadata"] = {
        "labels": {SERVICE_NAME: "other", "team": "search"},
        "annotations": {"aisched.io/gpu-share": "0:1000:81920", "a": "b"},
    }
    pod = build_replica_pod(service, _slot())
    assert pod["metadata"]["labels"][SERVICE_NAME] == "chat" and pod["metadata"]["labels"]["team"] == "search"
    assert pod["metadata"]["annotations"] == {"a": "b"}


def _conditions(scheduled_at: str | None, ready_at: str | None) -> list[dict[str, Any]]:
    found = []
    if scheduled_at is not None:
        found.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at})
    if ready_at is not None:
        found.append({"type": "Ready", "status": "True", "lastTransitionTime": ready_at})
    return found


def test_a_replicas_boot_is_read_from_its_binding_to_its_readiness_and_only_once_it_is_ready() -> None:
    pod = build_replica_pod(_service(), _slot())

    def boot(scheduled_at: str | None, ready_at: str | None) -> float | None:
        seen = serving_pod_from_object(_as_seen(pod, node="h100-1", conditions=_conditions(scheduled_at, ready_at)))
        assert seen is not None
        return seen.boot_seconds

    assert boot("2026-01-01T00:00:00Z", "2026-01-01T00:02:30Z") == 150.0
    assert boot("2026-01-01T00:00:00Z", None) is None  # still loading its model
    assert boot(None, "2026-01-01T00:02:30Z") is None
    assert boot("2026-01-01T00:05:00Z", "2026-01-01T00:02:30Z") is None  # a clock that ran backwards
    assert boot("2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z") == 3600.0  # bounded: it went unready and back
    assert boot("2026-01-01T00:00:00Z", "yesterday") is None
    assert boot("2026-01-01T00:00:00", "2026-01-01T00:02:30Z") is None  # one time with a zone, one without
