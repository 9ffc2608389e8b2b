"""The `workloads` benchmark's pure parts: each arm's Job, Kueue's objects and configuration out of
cluster, the cluster of any size, the arms chosen, and the results file's figures."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import pytest

from aisched.policy.cluster_description import describe_cluster
from aisched.policy.workloads.model import QUEUE_LABEL
from benchmarks.e2e_workloads import KEEP_RUNNING, GangShape
from benchmarks.workloads import objects
from benchmarks.workloads.bench import parse_arms

SHAPE = GangShape(replicas=4, gpus_per_replica=8)


def test_every_arm_runs_the_same_pods_of_an_indexed_job() -> None:
    jobs = {arm: objects.gang_job("llm", "ns", SHAPE, arm) for arm in objects.ARMS}

    for job in jobs.values():
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
        assert "suspend" not in spec  # each arm's admission suspends it, or nothing does
        assert spec["template"]["metadata"]["annotations"][KEEP_RUNNING] == "true"
        (container,) = spec["template"]["spec"]["containers"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}}
    containers = {str(job["spec"]["template"]["spec"]) for job in jobs.values()}
    assert len(containers) == 1


def test_each_arm_labels_the_job_as_its_users_do() -> None:
    aisched, kueue, bare = (objects.gang_job("llm", "ns", SHAPE, arm) for arm in objects.ARMS)

    assert aisched["metadata"]["labels"] == {QUEUE_LABEL: objects.AISCHED_QUEUE}
    assert kueue["metadata"]["labels"] == {objects.KUEUE_QUEUE_LABEL: objects.QUEUE}
    assert kueue["spec"]["template"]["metadata"]["annotations"][objects.KUEUE_PREFERRED_TOPOLOGY] == "aisched.io/rack"
    assert bare["metadata"]["labels"] == {}
    assert objects.KUEUE_PREFERRED_TOPOLOGY not in bare["spec"]["template"]["metadata"]["annotations"]


def test_kueue_tas_objects_name_each_other() -> None:
    topology, flavor, cluster_queue, local_queue = objects.kueue_queue_objects("ns", gpus=64)

    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "topology.kubernetes.io/zone",
        "aisched.io/rack",
        "kubernetes.io/hostname",
    ]
    assert flavor["spec"] == {"nodeLabels": {"nvidia.com/gpu.present": "true"}, "topologyName": "default"}
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    (group,) = cluster_queue["spec"]["resourceGroups"]
    assert group["flavors"] == [
        {"name": flavor["metadata"]["name"], "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 64}]}
    ]
    assert local_queue["metadata"]["namespace"] == "ns"
    assert local_queue["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"] == objects.QUEUE


def webhook(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "clientConfig": {"service": {"name": "webhook-service", "path": path}}}


def test_kueue_webhooks_point_at_the_manager_out_of_cluster_scoped_as_its_kustomization_does() -> None:
    manifests: list[dict[str, Any]] = [
        {
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [webhook("mjob.kb.io", "/mutate-batch-v1-job"), webhook("mpod.kb.io", "/mutate--v1-pod")],
        }
    ]

    (configured,) = objects.kueue_webhooks(manifests, "https://127.0.0.1:9443/", "Q0E=")

    assert configured["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    job, pod = configured["webhooks"]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job", "caBundle": "Q0E="}
    assert "namespaceSelector" not in job
    (excluded,) = pod["namespaceSelector"]["matchExpressions"]
    assert (excluded["operator"], excluded["values"]) == ("NotIn", ["kube-system", "kueue-system"])
    assert manifests[0]["metadata"]["name"] == "mutating-webhook-configuration"  # the input is left as it was


def test_kueue_configuration_changes_only_where_its_servers_listen() -> None:
    default = {
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True},
        "controller": {"groupKindConcurrency": {"Job.batch": 5}},
        "integrations": {"frameworks": ["batch/job", "pod"]},
    }

    configured = objects.kueue_configuration(default, webhook_port=1, cert_dir="/certs", health_port=2, metrics_port=3)

    assert configured["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/certs"}
    assert configured["internalCertManagement"] == {"enable": False}
    assert configured["health"] == {"healthProbeBindAddress": "127.0.0.1:2"}
    assert configured["metrics"] == {"bindAddress": "127.0.0.1:3"}
    assert configured["leaderElection"] == {"leaderElect": True, "resourceNamespace": "kueue-system"}
    unchanged = ("controller", "integrations")
    assert {key: configured[key] for key in unchanged} == {key: default[key] for key in unchanged}
    assert default["webhook"] == {"port": 9443}


@pytest.mark.parametrize("nodes", [1, 24, 50, 1008])
def test_a_cluster_of_any_size_has_that_many_8_gpu_nodes_in_racks_of_24(nodes: int) -> None:
    described = describe_cluster(objects.cluster_description(nodes))

    assert len(described) == nodes
    racks = Counter(node.labels["aisched.io/rack"] for node in described)
    assert max(racks.values()) <= 24 and len(racks) == -(-nodes // 24)
    assert {node.labels["nvidia.com/gpu.count"] for node in described} == {"8"}


def test_a_cluster_of_no_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        objects.cluster_description(0)


def test_arms_are_taken_in_the_order_given_and_unknown_ones_refused() -> None:
    assert parse_arms("kube_scheduler, aisched") == ("kube_scheduler", "aisched")
    for text in ("volcano", "", "aisched,yunikorn"):
        with pytest.raises(argparse.ArgumentTypeError, match="arms are among"):
            parse_arms(text)


def arm(pods_per_s: float, gangs_whole: int, jobs: int = 10) -> dict[str, Any]:
    return {
        "pods_per_s": pods_per_s,
        "gangs_whole": gangs_whole,
        "gangs_whole_fraction": gangs_whole / jobs,
        "bind_p50_s": 1.0,
        "bind_p99_s": 2.0,
    }


def test_the_results_carry_each_arms_rate_and_the_targets() -> None:
    result = objects.summary(
        {"aisched": arm(40.0, 10), "kueue": arm(10.0, 10), "kube_scheduler": arm(45.0, 10)},
        nodes=48,
        jobs=10,
        pods=20,
        settings={},
    )

    assert (result["aisched_pods_per_s"], result["kueue_pods_per_s"], result["kube_scheduler_pods_per_s"]) == (
        40.0,
        10.0,
        45.0,
    )
    assert result["gangs_whole"] == {"aisched": 1.0, "kueue": 1.0, "kube_scheduler": 1.0}
    assert result["ratio_vs_kueue"] == 4.0 and result["ratio_vs_kube_scheduler"] == 0.889
    assert result["targets"] == {"vs_kueue_at_least_2x_every_gang_whole": True, "vs_kube_scheduler_at_least_0.8x": True}


def test_a_broken_gang_misses_the_kueue_target_whatever_the_rate() -> None:
    result = objects.summary(
        {"aisched": arm(40.0, 9), "kueue": arm(10.0, 10), "kube_scheduler": arm(100.0, 10)},
        nodes=48,
        jobs=10,
        pods=20,
        settings={},
    )

    assert result["targets"] == {
        "vs_kueue_at_least_2x_every_gang_whole": False,
        "vs_kube_scheduler_at_least_0.8x": False,
    }


def test_an_arm_not_run_is_null_never_a_figure() -> None:
    result = objects.summary(
        {"aisched": arm(40.0, 10), "kueue": None, "kube_scheduler": arm(50.0, 10)},
        nodes=48,
        jobs=10,
        pods=20,
        settings={},
    )

    assert result["kueue_pods_per_s"] is None and result["kueue"] is None
    assert result["gangs_whole"]["kueue"] is None and result["ratio_vs_kueue"] is None
    assert result["targets"]["vs_kueue_at_least_2x_every_gang_whole"] is None
    assert result["ratio_vs_kube_scheduler"] == 0.8
