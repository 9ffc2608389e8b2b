"""What the `workloads` benchmark submits and installs, built as plain data: the same Indexed Jobs for
every arm (labelled for aisched, for Kueue, or not at all), Kueue's queue objects and its webhook
configurations and Configuration as it runs out of cluster, a cluster description of any size, and
the figures of a run.

Pure: no cluster, no clock; benchmarks/workloads/bench.py does the I/O.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Literal

from aisched.policy.topology import LOCAL_RACK_LABEL, ZONE_LABEL
from aisched.policy.workloads.model import QUEUE_LABEL
from benchmarks.e2e_workloads import KEEP_RUNNING, TEMPLATE, GangShape

Arm = Literal["aisched", "kueue", "kube_scheduler"]
ARMS: tuple[Arm, ...] = ("aisched", "kueue", "kube_scheduler")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Kueue's Topology levels, widest first: the local cluster's zones, racks (its network blocks), nodes.
TOPOLOGY_LEVELS = (ZONE_LABEL, LOCAL_RACK_LABEL, HOSTNAME_LABEL)
GPU = "nvidia.com/gpu"
GPU_NODE_LABEL = "nvidia.com/gpu.present"  # GPU Feature Discovery's, on every GPU node: a TAS flavor needs a node label
QUEUE = "bench"
"""The queue every labelled Job names: aisched's default Queue is opened for the run
(`open_default_queue`); Kueue's LocalQueue of this name points at a ClusterQueue of the same name."""
AISCHED_QUEUE = "default"
NODES_PER_RACK = 24
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
QUEUE_LABEL_FOR: Mapping[Arm, str] = {"aisched": QUEUE_LABEL, "kueue": KUEUE_QUEUE_LABEL}
QUEUE_NAME_FOR: Mapping[Arm, str] = {"aisched": AISCHED_QUEUE, "kueue": QUEUE}


def gang_job(name: str, namespace: str, shape: GangShape, arm: Arm) -> dict[str, Any]:
    """SHAPE's gang as one Indexed Job (parallelism = completions = replicas), as each arm's users write it.

    aisched: the queue label on the Job (its admission policies suspend it and gate its pods).
    Kueue: its queue-name label, and on the pod template the topology its TAS docs tell users to
    prefer (a rack, as aisched places a gang in the tightest domain); its Job webhook suspends it.
    kube-scheduler: neither. The pods are the same in every arm: one container asking
    gpus_per_replica GPUs, kept Running by KWOK (KEEP_RUNNING) so that they hold their GPUs.
    """
    job_labels = {QUEUE_LABEL_FOR[arm]: QUEUE_NAME_FOR[arm]} if arm in QUEUE_LABEL_FOR else {}
    annotations = {KEEP_RUNNING: "true"}
    if arm == "kueue":
        annotations[KUEUE_PREFERRED_TOPOLOGY] = LOCAL_RACK_LABEL
    container = copy.deepcopy(TEMPLATE["spec"]["containers"][0])
    gpus = shape.gpus_per_replica
    container["resources"] = {"limits": {GPU: gpus}, "requests": {GPU: gpus}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": shape.replicas,
            "parallelism": shape.replicas,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [container], "restartPolicy": "Never"},
            },
        },
    }


def kueue_queue_objects(namespace: str, gpus: int) -> list[dict[str, Any]]:
    """A Topology of the cluster's levels, a ResourceFlavor of the GPU nodes using it (TAS), a ClusterQueue of GPUS
    GPUs in that flavor and a LocalQueue in NAMESPACE: Kueue's TAS set-up as its docs give it."""
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": "default"},
            "spec": {"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas-flavor"},
            "spec": {"nodeLabels": {GPU_NODE_LABEL: "true"}, "topologyName": "default"},
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "tas-flavor", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": QUEUE},
        },
    ]


# Kueue's kustomization (config/components/webhook) narrows these to namespaces other than its own
# and kube-system; the manifests file alone leaves that out.
NAMESPACED_WEBHOOKS = frozenset(
    {"mpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io", "vpod.kb.io", "vdeployment.kb.io", "vstatefulset.kb.io"}
)
KUEUE_EXCLUDED_NAMESPACES: dict[str, Any] = {
    "key": "kubernetes.io/metadata.name",
    "operator": "NotIn",
    "values": ["kube-system", "kueue-system"],
}
KUEUE_NAME_PREFIX = "kueue-"  # its kustomization's namePrefix


def kueue_webhooks(manifests: list[dict[str, Any]], base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) pointed at a manager
    out of cluster: each webhook's Service replaced by BASE_URL + its path, trusted through
    CA_BUNDLE (base64 PEM), named and scoped as Kueue's kustomization deploys them."""
    configured = []
    for manifest in copy.deepcopy(manifests):
        manifest["metadata"]["name"] = KUEUE_NAME_PREFIX + manifest["metadata"]["name"]
        for webhook in manifest.get("webhooks", []):
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle}
            if webhook["name"] in NAMESPACED_WEBHOOKS:
                excluded = {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", "kueue-system"],
                }
                webhook["namespaceSelector"] = {"matchExpressions": [excluded]}
        configured.append(manifest)
    return configured


def kueue_configuration(
    default: dict[str, Any], *, webhook_port: int, cert_dir: str, health_port: int, metrics_port: int
) -> dict[str, Any]:
    """Kueue's default Configuration (config/components/manager/controller_manager_config.yaml) with
    what running it out of cluster needs, and nothing that schedules: its webhook server on
    127.0.0.1:WEBHOOK_PORT with a certificate from CERT_DIR (its internal cert management issues
    one for its in-cluster Service, which the API server could not reach here), its leader
    election Lease's namespace named (in cluster it is the pod's), and its health and metrics
    servers on free local ports."""
    configuration = copy.deepcopy(default)
    configuration["webhook"] = {**configuration.get("webhook", {}), "host": "127.0.0.1", "port": webhook_port}
    configuration["webhook"]["certDir"] = cert_dir
    configuration["internalCertManagement"] = {"enable": False}
    # In cluster its leader election Lease goes to the namespace it runs in; out of cluster it must be told.
    election = configuration.setdefault("leaderElection", {})
    election["resourceNamespace"] = configuration.get("namespace", "kueue-system")
    configuration["health"] = {**configuration.get("health", {}), "healthProbeBindAddress": f"127.0.0.1:{health_port}"}
    configuration["metrics"] = {**configuration.get("metrics", {}), "bindAddress": f"127.0.0.1:{metrics_port}"}
    return configuration


def cluster_description(nodes: int) -> dict[str, Any]:
    """A hack/cluster.sh description of NODES 8-GPU H100 nodes, in racks of 24 dealt over three
    zones (the last rack shorter): the shape of the `large` preset at any size, for smoke runs."""
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, not {nodes}")
    racks = [min(NODES_PER_RACK, nodes - i * NODES_PER_RACK) for i in range(math.ceil(nodes / NODES_PER_RACK))]
    zones: dict[str, list[dict[str, Any]]] = {zone: [] for zone in ZONES}
    for index, size in enumerate(racks):
        rack = {"count": 1, "nodes": [{"type": "h100", "count": size, "capacityType": "on-demand"}]}
        zones[ZONES[index % len(ZONES)]].append(rack)
    gpu = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8, "memoryMiB": 81559}
    return {
        "region": "us-east-1",
        "nodeTypes": {"h100": {"instanceType": "p5.48xlarge", "gpu": gpu, "cpu": "192", "memory": "2048Gi"}},
        "zones": [{"name": name, "racks": racks_of} for name, racks_of in zones.items() if racks_of],
    }


def rate_ratio(numerator: float | None, denominator: float | None) -> float | None:
    """NUMERATOR / DENOMINATOR rounded, or None where either arm was not run (or bound nothing)."""
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def summary(
    arms: Mapping[Arm, dict[str, Any] | None], *, nodes: int, jobs: int, pods: int, settings: dict[str, Any]
) -> dict[str, Any]:
    """The results file: each arm's rate, gangs whole and bind latency at the top (None for an arm
    not run), the targets' ratios and whether they are met, then each arm's full figures."""

    def figure(arm: Arm, key: str) -> Any:
        found = arms.get(arm)
        return None if found is None else found.get(key)

    ours = figure("aisched", "pods_per_s")
    vs_kueue = rate_ratio(ours, figure("kueue", "pods_per_s"))
    vs_bare = rate_ratio(ours, figure("kube_scheduler", "pods_per_s"))
    every_gang_whole = figure("aisched", "gangs_whole") == jobs
    return {
        "nodes": nodes,
        "jobs": jobs,
        "pods": pods,
        **{f"{arm}_pods_per_s": figure(arm, "pods_per_s") for arm in ARMS},
        "gangs_whole": {arm: figure(arm, "gangs_whole_fraction") for arm in ARMS},
        "bind_p50_s": {arm: figure(arm, "bind_p50_s") for arm in ARMS},
        "bind_p99_s": {arm: figure(arm, "bind_p99_s") for arm in ARMS},
        "ratio_vs_kueue": vs_kueue,
        "ratio_vs_kube_scheduler": vs_bare,
        "targets": {
            "vs_kueue_at_least_2x_every_gang_whole": None if vs_kueue is None else vs_kueue >= 2 and every_gang_whole,
            "vs_kube_scheduler_at_least_0.8x": None if vs_bare is None else vs_bare >= 0.8,
        },
        **{arm: arms.get(arm) for arm in ARMS},
        "settings": settings,
    }
