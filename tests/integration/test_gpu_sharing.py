"""Parts of one GPU, for real: the operator's choice of GPU reaches the node through DRA (#29).

The local cluster's fake driver publishes every KWOK GPU as a `gpu.nvidia.com` device with
consumable compute and memory (hack/cluster.sh turns DRAConsumableCapacity on). Two training
workers asking 30% of a GPU each and a model-server replica asking 30% land, as the operator
planned, on one GPU of the one spot L4 node: each pod's claim is allocated by kube-scheduler's
own DRA allocator to exactly the device the operator wrote on the pod, and the pods run. A
tenant's own DRA claim in a template is refused by its queue's podPolicy, and no pod is made.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import yaml

from aisched.api.crd import all_crds
from aisched.kube.claims import CLAIM_NAME, SHARE_ANNOTATION
from aisched.policy.pod_policy import POD_POLICY_VIOLATION
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, list_objects, wait_for, workers
from tests.builders import a_training_job, an_inference_service

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
L4 = "NVIDIA-L4"  # the small preset's one spot L4 node has 4 of them


@pytest.fixture(scope="module", autouse=True)
def crds_with_gpu_share(cluster: LocalCluster, crds_installed: None) -> None:
    # The CRDs as the models make them now: `make generate` writes the same to crds/, which the
    # session applied; until it has been run after a model change, this is where they differ.
    for crd in all_crds():
        result = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(crd))
        assert result.returncode == 0, result.stderr


def _allocated_device(cluster: LocalCluster, namespace: str, pod: dict[str, Any]) -> str | None:
    """The device kube-scheduler allocated to POD's share claim, or None while there is none."""
    live = get_object(cluster, "pod", pod["metadata"]["name"], namespace)
    statuses = live.get("status", {}).get("resourceClaimStatuses") or []
    claim_name = next((s.get("resourceClaimName") for s in statuses if s.get("name") == CLAIM_NAME), None)
    if not claim_name:
        return None
    claim = get_object(cluster, "resourceclaim", claim_name, namespace)
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results") or []
    return results[0]["device"] if results else None


def _running_with_share(cluster: LocalCluster, namespace: str, selector: str, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in list_objects(cluster, "pods", namespace, selector) if p["status"].get("phase") == "Running"]
        return pods if len(pods) == count else None

    pods: list[dict[str, Any]] = wait_for(ready, TIMEOUT, f"{count} running pods of {selector}")
    return pods


def test_workers_and_a_replica_share_the_gpu_the_operator_chose(cluster: LocalCluster, namespace: str) -> None:
    job = a_training_job("shared").replicas(2).gpu_type(L4).spot("Only").gpu_share(computePercent=30).obj()
    apply(cluster, namespace, job)
    workers_running = _running_with_share(cluster, namespace, "aisched.io/job-name=shared", 2)
    service = (
        an_inference_service("chat")
        .set("gpuType", L4)
        .set("spot", {"policy": "Only", "minOnDemandReplicas": 0})
        .gpu_share(computePercent=30)
        .obj()
    )
    apply(cluster, namespace, service)
    replica = _running_with_share(cluster, namespace, "aisched.io/inference-service=chat", 1)
    pods = [*workers_running, *replica]

    nodes = {p["spec"]["nodeName"] for p in pods}
    planned = {p["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0] for p in pods}
    assert len(nodes) == 1 and len(planned) == 1, f"one GPU of one node for all three: {nodes} {planned}"
    for pod in pods:
        device = pod["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0]
        assert pod["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[1] == "300"
        assert not pod["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu")
        allocated = wait_for(partial(_allocated_device, cluster, namespace, pod), TIMEOUT, "the claim's device")
        assert allocated == device, f"{pod['metadata']['name']}: planned {device}, allocated {allocated}"
    assert len(workers(cluster, namespace, "shared")) == 2


def test_a_tenants_own_dra_claim_in_a_template_is_refused(cluster: LocalCluster, namespace: str) -> None:
    template = {
        "spec": {
            "resourceClaims": [{"name": "mine", "resourceClaimTemplateName": "eight-gpus"}],
            "containers": [{"name": "t", "image": "python:3.11-slim", "resources": {"claims": [{"name": "mine"}]}}],
        }
    }
    apply(cluster, namespace, a_training_job("sneaky").set("template", template).obj())

    def refusal() -> dict[str, Any] | None:
        conditions = get_object(cluster, "trainingjob", "sneaky", namespace).get("status", {}).get("conditions") or []
        admitted = next((c for c in conditions if c["type"] == "Admitted"), None)
        return admitted if admitted and admitted["reason"] == POD_POLICY_VIOLATION else None

    condition = wait_for(refusal, TIMEOUT, "the tenant's claim to be refused")
    assert condition["status"] == "False" and "spec.template.spec.resourceClaims" in condition["message"]
    assert workers(cluster, namespace, "sneaky") == []
