"""A charge is what the API server says a pod holds, and every object the operator makes is its own (#37).

Played as a tenant would, on the local cluster: a ServiceAccount with the built-in `edit` role in a
namespace under Pod Security `baseline` (and the rights to DRA claims a cluster with DRA gives its
users). Each attack worked before: what the operator saw as free (`aisched_gpus_free`, its own view)
went where the tenant wanted, and another tenant's job that fitted waited, or a 1% share held a node.

- 16 pods with nodeName set, naming 8 ResourceClaims each that do not exist: they hold nothing;
- one claim with `allocationMode: All` holds every GPU of its node, not one;
- share replicas whose `aisched.io/gpu-share` annotations the tenant rewrites hold what their claims
  are allocated, not what the annotation says;
- a pod created with a nodeName its kubelet never admits holds nothing there;
- a ResourceClaimTemplate made first under a worker's name is refused, not used.
"""

from __future__ import annotations

import copy
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from aisched.kube.claims import CLAIM_NAME, DEVICE_CLASS, SHARE_ANNOTATION
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, list_objects, wait_for, wait_phase
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job, an_inference_service

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
ON_DEMAND_H100 = f"nvidia.com/gpu.product={H100},karpenter.sh/capacity-type=on-demand"
SPOT_L4 = f"nvidia.com/gpu.product={L4},karpenter.sh/capacity-type=spot"
TENANT = "tenant"
PAUSE = "registry.k8s.io/pause:3.10"
GHOST = "unadmitted-"  # the name of a node no kubelet runs


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def as_tenant(cluster: LocalCluster, namespace: str, *args: str, obj: dict[str, Any] | None = None) -> str:
    user = f"--as=system:serviceaccount:{namespace}:{TENANT}"
    return ok(cluster.kubectl(user, "-n", namespace, *args, input=yaml.safe_dump(obj) if obj else None))


@pytest.fixture
def tenant(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    """NAMESPACE under Pod Security baseline, and its tenant: `edit`, and the DRA claims a DRA cluster allows."""
    ok(cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=baseline"))
    ok(cluster.kubectl("-n", namespace, "create", "serviceaccount", TENANT))
    subject = f"--serviceaccount={namespace}:{TENANT}"
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-edit", "--clusterrole=edit", subject))
    claims = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "dra-user", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims", "resourceclaimtemplates"],
                "verbs": ["get", "list", "watch", "create", "delete"],
            }
        ],
    }
    ok(cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(claims)))
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-dra", "--role=dra-user", subject))
    for verb, resource in (("create", "pods"), ("patch", "pods"), ("create", "resourceclaimtemplates")):
        assert as_tenant(cluster, namespace, "auth", "can-i", verb, resource).strip() == "yes"
    user = f"--as=system:serviceaccount:{namespace}:{TENANT}"
    status = cluster.kubectl(user, "-n", namespace, "auth", "can-i", "patch", "pods", "--subresource=status")
    assert status.stdout.strip() == "no", status  # what a pod holds is written by the cluster only
    yield namespace
    # The next test measures the cluster again: what this one made is gone first.
    cluster.kubectl("delete", "trainingjobs,inferenceservices,resourceclaims", "--all", "-n", namespace, "--wait=false")
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
    wait_for(lambda: not list_objects(cluster, "pods", namespace), TIMEOUT, f"the pods of {namespace} to go")


def free_gpus(operator: OperatorProcess, product: str, capacity_type: str) -> float | None:
    """The operator's own view of free GPUs of a pool (`aisched_gpus_free`), as it last reported it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "aisched_gpus_free" and sample.labels == {
                "gpu_type": product,
                "capacity_type": capacity_type,
            }:
                return float(sample.value)
    return None


def steady_free(operator: OperatorProcess, product: str, capacity_type: str, expected: float) -> float:
    """Wait until the operator reports EXPECTED free GPUs of the pool; EXPECTED. A timeout says what it reports."""
    try:
        wait_for(
            lambda: free_gpus(operator, product, capacity_type) == expected,
            TIMEOUT,
            f"the operator to see {expected} free {capacity_type} {product}",
        )
    except TimeoutError as late:
        raise AssertionError(f"{late}: it sees {free_gpus(operator, product, capacity_type)} free") from None
    return expected


def operator_caught_up(cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    """Return once the operator has handled every pod event before now: pod events come in order, so a pod
    holding one on-demand H100, made now, showing in its view, shows it has seen those before."""
    node = next(n for n in node_names(cluster, ON_DEMAND_H100) if not n.startswith(GHOST))
    before = free_gpus(operator, H100, "OnDemand")
    assert before is not None and before >= 1, f"no on-demand H100 free for the probe: {before}"
    name = f"probe-{uuid.uuid4().hex[:6]}"
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    as_tenant(
        cluster,
        namespace,
        "create",
        "-f",
        "-",
        obj=a_pod(name, nodeName=node, containers=[{"name": "c", "image": PAUSE, "resources": gpu}]),
    )
    try:
        steady_free(operator, H100, "OnDemand", before - 1)
    except AssertionError as late:
        raise AssertionError(
            f"{late}; the probe: {get_object(cluster, 'pod', name, namespace).get('status')}"
        ) from None
    as_tenant(cluster, namespace, "delete", "pod", name, "--grace-period=0", "--force")
    steady_free(operator, H100, "OnDemand", before)


def node_names(cluster: LocalCluster, selector: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in list_objects(cluster, "nodes", "", selector))


def a_pod(name: str, **spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "c", "image": PAUSE}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": containers, **spec}}


def claim_of(cluster: LocalCluster, namespace: str, pod: str, entry: str) -> dict[str, Any] | None:
    """The ResourceClaim kube-controller-manager made for POD's ENTRY, once made."""
    statuses = get_object(cluster, "pod", pod, namespace).get("status", {}).get("resourceClaimStatuses") or []
    name = next((s.get("resourceClaimName") for s in statuses if s.get("name") == entry), None)
    return get_object(cluster, "resourceclaim", name, namespace) if name else None


def allocated_results(claim: dict[str, Any] | None) -> list[dict[str, Any]]:
    results = ((claim or {}).get("status") or {}).get("allocation", {}).get("devices", {}).get("results")
    return list(results or [])


def test_pods_naming_claims_that_do_not_exist_leave_the_gpus_free(
    cluster: LocalCluster, operator: OperatorProcess, tenant: str
) -> None:
    nodes = node_names(cluster, ON_DEMAND_H100)
    free = steady_free(operator, H100, "OnDemand", 8.0 * len(nodes))
    for i in range(16):
        claims = [{"name": f"c{j}", "resourceClaimName": f"ghost-{i}-{j}"} for j in range(8)]
        as_tenant(
            cluster,
            tenant,
            "create",
            "-f",
            "-",
            obj=a_pod(f"squat-{i}", nodeName=nodes[i % len(nodes)], resourceClaims=claims),
        )
    wait_for(
        lambda: sum(p["status"].get("phase") == "Running" for p in list_objects(cluster, "pods", tenant)) == 16,
        TIMEOUT,
        "the kubelets to run the 16 pods",
    )
    operator_caught_up(cluster, operator, tenant)
    steady_free(operator, H100, "OnDemand", free)
    # Another tenant's gang that needs every on-demand H100 whole still starts: the pods hold none of them.
    gang = a_training_job(f"whole-{uuid.uuid4().hex[:4]}").gpu_type(H100).spot("Never")
    apply(cluster, tenant, gang.replicas(len(nodes)).gpus(8).obj())
    wait_phase(cluster, tenant, gang.obj()["metadata"]["name"], "Running")
    print(f"\nfree on-demand H100 in the operator's view, with the 16 pods and before the gang: {free}")


def test_a_claim_allocated_every_gpu_of_its_node_holds_them_all(
    cluster: LocalCluster, operator: OperatorProcess, tenant: str
) -> None:
    (node,) = node_names(cluster, SPOT_L4)
    gpus = int(get_object(cluster, "node", node, "")["status"]["allocatable"]["nvidia.com/gpu"])
    steady_free(operator, L4, "Spot", float(gpus))
    everything = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "everything"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "All"}}]
            }
        },
    }
    as_tenant(cluster, tenant, "create", "-f", "-", obj=everything)
    greedy = a_pod(
        "greedy",
        nodeSelector={"kubernetes.io/hostname": node},
        resourceClaims=[{"name": "all", "resourceClaimName": "everything"}],
        containers=[{"name": "c", "image": PAUSE, "resources": {"claims": [{"name": "all"}]}}],
    )
    as_tenant(cluster, tenant, "create", "-f", "-", obj=greedy)
    wait_for(
        lambda: len(allocated_results(get_object(cluster, "resourceclaim", "everything", tenant))) == gpus,
        TIMEOUT,
        f"the claim to be allocated all {gpus} GPUs of {node}",
    )
    steady_free(operator, L4, "Spot", 0.0)  # was gpus - 1: one claim counted as one GPU
    print(f"\nfree spot L4 in the operator's view with one allocationMode All claim: 0 of {gpus}")


def test_share_annotations_a_tenant_rewrites_change_nothing_it_holds(
    cluster: LocalCluster, operator: OperatorProcess, tenant: str
) -> None:
    (node,) = node_names(cluster, SPOT_L4)
    gpus = int(get_object(cluster, "node", node, "")["status"]["allocatable"]["nvidia.com/gpu"])
    steady_free(operator, L4, "Spot", float(gpus))
    service = (
        an_inference_service("chat")
        .replicas(4)
        .set("gpuType", L4)
        .set("spot", {"policy": "Only", "minOnDemandReplicas": 0})
        .gpu_share(computePercent=1)
        .obj()
    )
    apply(cluster, tenant, service)

    def allocated_replicas() -> list[dict[str, Any]] | None:
        pods = list_objects(cluster, "pods", tenant, "aisched.io/inference-service=chat")
        held = [p for p in pods if allocated_results(claim_of(cluster, tenant, p["metadata"]["name"], CLAIM_NAME))]
        return held if len(held) == 4 else None

    replicas = wait_for(allocated_replicas, TIMEOUT, "4 replicas with their claims allocated")
    shared = {p["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0] for p in replicas}
    steady_free(operator, L4, "Spot", float(gpus - len(shared)))
    # Each replica now says it holds 0.1% of another GPU: four GPUs look taken if the annotation is believed.
    for i, pod in enumerate(replicas):
        forged = json.dumps({"metadata": {"annotations": {SHARE_ANNOTATION: f"gpu-{i},1,1"}}})
        as_tenant(cluster, tenant, "patch", "pod", pod["metadata"]["name"], "--type=merge", "-p", forged)
    operator_caught_up(cluster, operator, tenant)
    steady_free(operator, L4, "Spot", float(gpus - len(shared)))
    # Another tenant's job that fits the GPUs the shares leave whole starts.
    apply(cluster, tenant, a_training_job("fits").gpu_type(L4).spot("Only").gpus(gpus - len(shared)).obj())
    wait_phase(cluster, tenant, "fits", "Running")
    print(f"\nfree spot L4 in the operator's view after the forged annotations: {gpus - len(shared)} of {gpus}")


def test_a_pod_given_a_node_its_kubelet_never_admits_holds_nothing_there(
    cluster: LocalCluster, operator: OperatorProcess, tenant: str
) -> None:
    nodes = node_names(cluster, ON_DEMAND_H100)
    free = steady_free(operator, H100, "OnDemand", 8.0 * len(nodes))
    # A node no kubelet runs (kwok manages only nodes annotated for it), Ready as its Node says for now.
    ghost = copy.deepcopy(get_object(cluster, "node", nodes[0], ""))
    name = f"{GHOST}{uuid.uuid4().hex[:6]}"
    kept = ("nvidia.com/", "karpenter.sh/capacity-type", "topology.kubernetes.io/", "node.kubernetes.io/instance-type")
    pool = {k: v for k, v in ghost["metadata"]["labels"].items() if k.startswith(kept)}
    ghost["metadata"] = {"name": name, "labels": {**pool, "kubernetes.io/hostname": name}}
    ghost["spec"] = {}
    status = ghost["status"]  # nothing of the node copied that its kubelet (kwok) knows it by: no address
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    ghost["status"] = {"capacity": status["capacity"], "allocatable": status["allocatable"], "conditions": ready}
    ok(cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(ghost)))
    try:
        steady_free(operator, H100, "OnDemand", free + 8)
        pod = a_pod(
            "direct",
            nodeName=name,
            containers=[{"name": "c", "image": PAUSE, "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        )
        as_tenant(cluster, tenant, "create", "-f", "-", obj=pod)
        # Created, never admitted (no status): the operator counts its GPUs nowhere.
        assert get_object(cluster, "pod", "direct", tenant).get("status", {}).get("phase") == "Pending"
        operator_caught_up(cluster, operator, tenant)
        steady_free(operator, H100, "OnDemand", free + 8)
        print(f"\nfree on-demand H100 in the operator's view with a pod never admitted on a new node: {free + 8}")
    finally:
        cluster.kubectl("delete", "pod", "direct", "-n", tenant, "--force", "--grace-period=0")
        cluster.kubectl("delete", "node", name)


def test_a_claim_template_made_first_under_a_workers_name_is_refused_not_used(
    cluster: LocalCluster, operator: OperatorProcess, tenant: str
) -> None:
    squatted = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "tiny-g1-w0"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "All"}}]
                }
            }
        },
    }
    as_tenant(cluster, tenant, "create", "-f", "-", obj=squatted)
    apply(cluster, tenant, a_training_job("tiny").gpu_type(L4).spot("Only").gpu_share(computePercent=1).obj())
    message = f"ResourceClaimTemplate {tenant}/tiny-g1-w0 exists and is not aisched's: delete it or rename the job"

    def refused() -> list[dict[str, Any]]:
        return [e for e in list_objects(cluster, "events", tenant) if message in (e.get("message") or "")]

    wait_for(refused, TIMEOUT, "the job to say the template is not the operator's")
    # Nothing of ours uses it: no claim was made from it, and no pod of the job names it.
    assert not any(
        ref.get("resourceClaimTemplateName") == "tiny-g1-w0"
        for pod in list_objects(cluster, "pods", tenant, "aisched.io/job-name=tiny")
        for ref in pod["spec"].get("resourceClaims") or []
    )
    assert all(len(allocated_results(c)) <= 1 for c in list_objects(cluster, "resourceclaims", tenant))
    as_tenant(cluster, tenant, "delete", "resourceclaimtemplate", "tiny-g1-w0")
    wait_phase(cluster, tenant, "tiny", "Running")
    (worker,) = list_objects(cluster, "pods", tenant, "aisched.io/job-name=tiny")
    results = wait_for(
        lambda: allocated_results(claim_of(cluster, tenant, worker["metadata"]["name"], CLAIM_NAME)),
        TIMEOUT,
        "the worker's own claim to be allocated",
    )
    assert len(results) == 1 and results[0].get("consumedCapacity", {}).get("compute") == "10", results
