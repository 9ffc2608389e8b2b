"""Plain pods as one workload: the group their labels name, as big as they say, as old as the oldest."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aisched.policy.workloads.kinds import INVALID_WORKLOAD, UNSUPPORTED_WORKLOAD
from aisched.policy.workloads.model import (
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    PodSet,
    Refusal,
    Workload,
    WorkloadKind,
)
from aisched.policy.workloads.pod_group import read_pod_group
from tests.unit.policy.workloads.manifests import QUEUE, group_pod


def group(*pods: dict[str, Any], **kwargs: str) -> Workload:
    read = read_pod_group(pods, **kwargs)
    assert isinstance(read, Workload), read
    return read


def refused(*pods: dict[str, Any]) -> Refusal:
    read = read_pod_group(pods)
    assert isinstance(read, Refusal), read
    return read


def test_a_group_is_as_big_as_it_says_and_as_old_as_its_oldest_pod() -> None:
    younger = group_pod("p1", size=4, created="2026-01-01T00:05:00Z")
    oldest = group_pod("p0", size=4, created="2026-01-01T00:00:00Z")
    oldest["metadata"]["annotations"][PRIORITY_ANNOTATION] = "7"
    workload = group(younger, oldest)
    assert (workload.kind, workload.namespace, workload.name, workload.uid) == (
        WorkloadKind.POD_GROUP,
        "ml",
        "allreduce",
        "uid-p0",
    )
    assert workload.key == "ml/allreduce@pods"
    assert workload.pod_sets == (PodSet("main", 4, 8),)
    assert (workload.queue, workload.priority, workload.created) == (QUEUE, 7, datetime(2026, 1, 1, tzinfo=UTC))
    assert workload.gang and not workload.finished


def test_a_pod_alone_is_a_group_of_one_named_after_it() -> None:
    workload = group(group_pod("solo", group=None, gpus=2))
    assert (workload.name, workload.uid, workload.pod_sets) == ("solo", "uid-solo", (PodSet("main", 1, 2),))
    assert "each is a group of one" in refused(group_pod("a", group=None), group_pod("b", group=None)).message


def test_no_queue_is_not_aisched_s_unless_the_namespace_names_one() -> None:
    pod = group_pod("p0", size=1)
    del pod["metadata"]["labels"][QUEUE_LABEL]
    assert read_pod_group([pod]) is None
    assert read_pod_group([]) is None
    assert group(pod, default_queue="shared").queue == "shared"


def test_a_group_whose_pods_all_ended_is_finished() -> None:
    pods = [group_pod(f"p{i}", size=2) for i in range(2)]
    pods[0]["status"] = {"phase": "Succeeded"}
    pods[1]["status"] = {"phase": ["Failed"]}
    assert not group(*pods).finished
    pods[1]["status"] = {"phase": "Failed"}
    assert group(*pods).finished


def test_pods_that_disagree_are_refused() -> None:
    sizes = refused(group_pod("p0", size=2), group_pod("p1", size=3))
    assert sizes.reason == INVALID_WORKLOAD
    assert (
        sizes.message
        == f"the pods of group 'allreduce' say different sizes in metadata.annotations['{POD_GROUP_SIZE_ANNOTATION}']: "
        "2, 3"
    )
    gpus = refused(group_pod("p0", gpus=8), group_pod("p1", gpus=4))
    assert gpus.reason == UNSUPPORTED_WORKLOAD
    assert (
        gpus.message == "the pods of group 'allreduce' ask different GPUs per pod (p0 8, p1 4): "
        "aisched places one shape per workload"
    )
    other = group_pod("p1")
    other["metadata"]["labels"][QUEUE_LABEL] = "team-b"
    assert "name different queues" in refused(group_pod("p0"), other).message
    assert "different groups" in refused(group_pod("p0"), group_pod("p1", group="other")).message
    elsewhere = group_pod("p1")
    elsewhere["metadata"]["namespace"] = "other"
    assert "different namespaces" in refused(group_pod("p0"), elsewhere).message


def test_sizes_that_cannot_be_a_group_are_refused() -> None:
    assert "between 1 and 10000" in refused(group_pod("p0", size=0)).message
    assert "between 1 and 10000" in refused(group_pod("p0", size=10_001)).message
    assert "must be a whole number" in refused(group_pod("p0", size="two")).message
    assert "more than its size 1" in refused(group_pod("p0", size=1), group_pod("p1", size=1)).message
    missing = group_pod("p0")
    del missing["metadata"]["annotations"][POD_GROUP_SIZE_ANNOTATION]
    assert "must say the size of group 'allreduce'" in refused(missing).message


def test_garbage_pods_are_refused_or_skipped_never_raised() -> None:
    pod = group_pod("p0", size=1)
    pod["spec"] = {"containers": "trainer"}
    assert refused(pod).message == "pod 'p0'.spec.containers must be a list, not 'trainer'"
    assert read_pod_group("pods") is None  # type: ignore[arg-type]
    bad_label = group_pod("p0")
    bad_label["metadata"]["labels"][QUEUE_LABEL] = ["team-a"]
    assert "must name a queue" in refused(bad_label).message
    numbered = group_pod("p0")
    numbered["metadata"]["labels"][POD_GROUP_LABEL] = 7
    refusal = refused(numbered)
    assert refusal.name == "p0" and "different groups, or none" in refusal.message
