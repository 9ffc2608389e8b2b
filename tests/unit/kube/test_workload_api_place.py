"""The one write that places a workload's gated pod (`WorkloadApi.place_pod`), applied as the API server
applies a JSON patch (RFC 6902, the `jsonpatch` library kopf also uses): the charged-queue label, the
node, and the admission gate lifted land together on the pod as it was read, or none does."""

from __future__ import annotations

import copy
from typing import Any, cast

import jsonpatch
import pytest

from aisched.kube.client import KubeClient
from aisched.kube.labels import HOSTNAME
from aisched.kube.workload_api import WorkloadApi
from aisched.policy.workloads.model import ADMISSION_GATE, CHARGED_QUEUE_LABEL

pytestmark = pytest.mark.asyncio
OTHER_GATE = "example.com/quota-check"


class Core:
    def patch_namespaced_pod(self) -> None: ...


class ApiServer:
    """Holds one pod and applies the JSON patch `place_pod` sends to it, as the API server would."""

    def __init__(self, pod: dict[str, Any]) -> None:
        self.core = Core()
        self.pod = pod

    async def send(self, method: Any, name: str, namespace: str, ops: list[dict[str, Any]], **_: Any) -> None:
        assert method == self.core.patch_namespaced_pod and (namespace, name) == ("ns", "w-0")
        self.pod = jsonpatch.apply_patch(self.pod, ops)  # raises, changing nothing, when a test op fails


def gated_pod(*, labels: dict[str, str] | None, selector: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "w-0", "namespace": "ns"}
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"schedulingGates": [{"name": ADMISSION_GATE}, {"name": OTHER_GATE}]}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"metadata": metadata, "spec": spec}


def gates(pod: dict[str, Any]) -> tuple[str, ...]:
    return tuple(g["name"] for g in pod["spec"]["schedulingGates"])


@pytest.mark.parametrize("labels", [{"app": "vllm"}, None], ids=["labelled", "no_labels"])
@pytest.mark.parametrize("selector", [{"pool": "gpu"}, None], ids=["selector", "no_selector"])
async def test_the_pod_is_labelled_pinned_and_ungated_keeping_what_it_had(
    labels: dict[str, str] | None, selector: dict[str, str] | None
) -> None:
    server = ApiServer(gated_pod(labels=labels, selector=selector))
    api = WorkloadApi(cast(KubeClient, server))
    read = server.pod
    await api.place_pod(
        "ns",
        "w-0",
        "n1",
        gates(read),
        has_selector=selector is not None,
        queue="team",
        has_labels=labels is not None,
    )
    assert server.pod["metadata"]["labels"] == {**(labels or {}), CHARGED_QUEUE_LABEL: "team"}
    assert server.pod["spec"]["nodeSelector"] == {**(selector or {}), HOSTNAME: "n1"}
    assert gates(server.pod) == (OTHER_GATE,)


async def test_a_pod_of_no_gpus_is_ungated_and_labelled_where_kube_scheduler_puts_it() -> None:
    server = ApiServer(gated_pod(labels={"app": "ray"}, selector=None))
    await WorkloadApi(cast(KubeClient, server)).place_pod(
        "ns", "w-0", None, gates(server.pod), has_selector=False, queue="team"
    )
    assert "nodeSelector" not in server.pod["spec"]
    assert server.pod["metadata"]["labels"][CHARGED_QUEUE_LABEL] == "team"
    assert gates(server.pod) == (OTHER_GATE,)


async def test_gates_changed_since_the_pod_was_read_refuse_the_whole_write() -> None:
    """Another controller lifted its own gate meanwhile: the patch's test fails, and neither the label nor
    the node lands (the next event reads the pod again and places it)."""
    server = ApiServer(gated_pod(labels={"app": "vllm"}, selector=None))
    read = copy.deepcopy(server.pod)
    server.pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    before = copy.deepcopy(server.pod)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        await WorkloadApi(cast(KubeClient, server)).place_pod(
            "ns", "w-0", "n1", gates(read), has_selector=False, queue="team"
        )
    assert server.pod == before
