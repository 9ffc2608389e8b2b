from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aisched.api import CapacityType
from aisched.kube.inventory import Inventory
from aisched.kube.quantities import MAX_GPUS_PER_OBJECT
from aisched.settings import Settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def node(name: str, gpus: int = 8, *, ready: bool = True, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, node_name: str | None, gpus: int, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": extra.pop("labels", {}), **extra},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 1}}}],
        },
        "status": {"phase": phase},
    }


def test_counts_gpus_of_every_bound_running_pod() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("n2")])
    inventory.upsert_pod(pod("theirs", "n1", 3))
    inventory.upsert_pod(pod("done", "n1", 4, phase="Succeeded"))
    inventory.upsert_pod(pod("pending", None, 2, phase="Pending"))
    assert inventory.used_gpus("n1") == 3
    snapshot = inventory.snapshot({"n2": 8})
    assert snapshot.free_gpus("n1") == 5
    assert snapshot.free_gpus("n2") == 0


def test_a_pod_moving_or_vanishing_moves_its_gpus() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("n2")])
    inventory.upsert_pod(pod("p", "n1", 2))
    inventory.upsert_pod(pod("p", "n2", 2))
    assert (inventory.used_gpus("n1"), inventory.used_gpus("n2")) == (0, 2)
    inventory.delete_pod("ns", "p")
    assert inventory.used_gpus("n2") == 0


def test_relist_replaces_whatever_the_watch_missed() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("gone")])
    inventory.upsert_pod(pod("orphan", "n1", 8))
    inventory.replace_nodes([node("n1")])
    inventory.replace_pods([])
    assert set(inventory.nodes) == {"n1"}
    assert inventory.used_gpus("n1") == 0


def test_labels_give_topology_product_and_capacity_type() -> None:
    inventory = Inventory(Settings(topology={"preset": "local"}))
    assert inventory.upsert_node(
        {
            "metadata": {
                "name": "n1",
                "labels": {
                    "karpenter.sh/capacity-type": "spot",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "aisched.io/rack": "r1",
                    "topology.kubernetes.io/zone": "z1",
                    "nvidia.com/gpu.clique": "c1",
                },
            },
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    record = inventory.nodes["n1"]
    assert record.capacity_type == CapacityType.SPOT
    assert (record.zone, record.domains) == ("z1", ("z1", "r1", "c1"))
    assert record.gpu_product == "NVIDIA-H100-80GB-HBM3"


def test_interruption_taints_and_nodes_not_ready_past_the_grace_are_doomed() -> None:
    inventory = Inventory(Settings(node_not_ready_grace_seconds=60))
    blip = node("blip", ready=False)
    blip["status"]["conditions"][0]["lastTransitionTime"] = T0.isoformat()
    inventory.replace_nodes(
        [
            node("ok"),
            node("notice", taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]),
            node("sick", ready=False),  # not Ready since nobody says when: lost at once
            blip,
        ]
    )
    assert inventory.doomed_nodes(T0 + timedelta(seconds=59)) == {"notice", "sick"}
    assert inventory.not_ready_grace_ends(["ok", "blip"]) == T0 + timedelta(seconds=60)
    assert inventory.doomed_nodes(T0 + timedelta(seconds=60)) == {"notice", "sick", "blip"}
    inventory.replace_nodes([node("ok"), node("blip")])  # Ready again in time: nothing moved
    assert inventory.doomed_nodes(T0 + timedelta(hours=1)) == set()
    # A notice that comes and goes by watch event is seen both ways (the answer is kept between nodes' changes).
    inventory.upsert_node(node("ok", taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]))
    assert inventory.doomed_nodes(T0 + timedelta(hours=1)) == {"ok"}
    inventory.upsert_node(node("ok"))
    assert inventory.doomed_nodes(T0 + timedelta(hours=1)) == set()


def test_karpenters_disruption_taint_is_an_interruption_notice() -> None:
    # Karpenter taints a node it is about to take (consolidation, drift, expiry, its own spot notice):
    # the gang on it checkpoints and is placed again, as on a cloud's spot notice.
    inventory = Inventory(Settings())
    disrupted = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    inventory.replace_nodes([node("kept"), node("taken", taints=disrupted)])
    assert inventory.doomed_nodes(T0) == {"taken"}


OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "llm"}


def test_termination_message_and_unschedulable_reason_are_read() -> None:
    inventory = Inventory(Settings())
    obj = pod("w", "n1", 1, phase="Failed", labels=dict(OURS))
    obj["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 75, "message": '{"step": 10}'}}}]
    record = inventory.upsert_pod(obj)
    assert record is not None
    assert (record.exit_code, record.termination_message) == (75, '{"step": 10}')
    stuck = pod("s", None, 1, phase="Pending", labels=dict(OURS))
    stuck["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "message": "0/3 nodes are available",
        }
    ]
    stuck_record = inventory.upsert_pod(stuck)
    assert stuck_record is not None
    assert stuck_record.unschedulable_message == "0/3 nodes are available"


@pytest.mark.parametrize(
    ("quantity", "pod_gpus", "node_gpus"),
    [
        ("1.5", 2, 1),  # part of a GPU holds a whole one, and offers none
        ("abc", 0, 0),
        ("", 0, 0),
        ("-1", 0, 0),
        ("1000m", 1, 1),
        ("2k", 2000, 2000),
        ("1e400", MAX_GPUS_PER_OBJECT, MAX_GPUS_PER_OBJECT),
        ("9" * 40, MAX_GPUS_PER_OBJECT, MAX_GPUS_PER_OBJECT),  # a typo must not size every snapshot
        ([], 0, 0),
        ({"x": 1}, 0, 0),
        (True, 0, 0),
    ],
)
def test_a_malformed_quantity_counts_as_what_it_can_mean_and_raises_nothing(
    quantity: Any, pod_gpus: int, node_gpus: int
) -> None:
    inventory = Inventory(Settings())
    odd_node = node("odd")
    odd_node["status"]["allocatable"]["nvidia.com/gpu"] = quantity
    inventory.replace_nodes([odd_node, node("n1")])
    assert inventory.nodes["odd"].allocatable_gpus == node_gpus
    record = inventory.upsert_pod(
        pod("p", "n1", 0)
        | {
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": quantity}}}],
            }
        }
    )
    assert record is not None and record.gpus == pod_gpus
    assert inventory.used_gpus("n1") == pod_gpus


@pytest.mark.parametrize(
    "odd",
    [
        {"spec": "nope"},
        {"spec": {"containers": "nope", "initContainers": [None, 3], "nodeSelector": []}},
        {"status": {"conditions": {"type": "Ready"}, "containerStatuses": [{"state": []}, 5]}},
        {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": "75", "message": 3}}}]}},
        {
            "status": {
                "phase": 7,
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "lastTransitionTime": "yesterday",
                    }
                ],
            }
        },
        {"metadata": {"namespace": "ns", "name": "p", "labels": {"aisched.io/job-name": 5}}},
    ],
)
def test_a_pod_with_odd_contents_is_read_as_far_as_it_goes(odd: dict[str, Any]) -> None:
    inventory = Inventory(Settings())
    obj = pod("p", "n1", 2)
    for part, value in odd.items():
        obj[part] = value if not isinstance(value, dict) else {**obj.get(part, {}), **value}
    record = inventory.upsert_pod(obj)
    assert record is not None and record.name == "p"


def test_an_object_that_cannot_be_read_at_all_leaves_the_others_alone() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([{"status": {}}, node("n1", taints=[{"key": "k", "effect": "Sometimes"}])])
    assert set(inventory.nodes) == {"n1"}
    assert inventory.nodes["n1"].taints == ()  # a taint no scheduler knows is left out
    inventory.replace_pods([{"metadata": {"name": "no-namespace"}}, pod("fine", "n1", 3)])
    assert inventory.used_gpus("n1") == 3
    assert inventory.upsert_pod({"metadata": "nope"}) is None
    assert inventory.upsert_node({"metadata": {"name": "n2"}, "spec": [], "status": 3})
    assert "n2" in inventory.nodes


def versioned(obj: dict[str, Any], version: int) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}


def test_a_relist_keeps_the_watch_copy_newer_than_the_list() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_pod(versioned(pod("p", "n2", 2), 12))  # the watch saw it move after the list was read
    changed = inventory.replace_pods([versioned(pod("p", "n1", 2), 9)], list_version="10")
    assert inventory.pods[("ns", "p")].node == "n2"
    assert changed == []


def test_a_relist_takes_the_listed_copy_newer_than_ours() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_pod(versioned(pod("p", None, 2, phase="Pending"), 5))
    (changed,) = inventory.replace_pods([versioned(pod("p", "n1", 2), 9)], list_version="10")
    assert changed.node == "n1" and inventory.used_gpus("n1") == 2


def test_a_relist_deletes_what_it_left_out_unless_the_watch_saw_it_after_the_list() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_pod(versioned(pod("deleted-in-the-gap", "n1", 4, labels=dict(OURS)), 7))
    inventory.upsert_pod(versioned(pod("created-after-the-list", "n1", 2), 11))
    changed = inventory.replace_pods([], list_version="10")
    assert set(inventory.pods) == {("ns", "created-after-the-list")}
    assert [(r.name, r.job_key) for r in changed] == [("deleted-in-the-gap", ("ns", "llm"))]
    assert inventory.used_gpus("n1") == 2
    assert inventory.pods_of_job("ns", "llm") == []


def test_a_deletion_the_watch_saw_during_the_list_is_not_undone() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_pod(versioned(pod("p", "n1", 2), 5))
    inventory.delete_pod("ns", "p", "12")  # deleted after the list was read at 10
    inventory.replace_pods([versioned(pod("p", "n1", 2), 5)], list_version="10")
    assert inventory.pods == {}
    # Nor does a watch event older than the deletion bring it back; a new pod of that name may come.
    inventory.upsert_pod(versioned(pod("p", "n1", 2), 11))
    assert inventory.pods == {}
    inventory.upsert_pod(versioned(pod("p", "n2", 2), 13))
    assert inventory.pods[("ns", "p")].node == "n2"


def test_a_watch_event_older_than_our_copy_is_ignored() -> None:
    inventory = Inventory(Settings())
    inventory.replace_pods([versioned(pod("p", "n1", 2, phase="Succeeded"), 20)], list_version="20")
    record = inventory.upsert_pod(versioned(pod("p", "n1", 2), 15))
    assert record is not None and record.phase == "Succeeded" and inventory.used_gpus("n1") == 0
    assert inventory.delete_pod("ns", "p", "15") is None and ("ns", "p") in inventory.pods


def test_versions_that_are_not_integers_leave_the_list_in_charge() -> None:
    inventory = Inventory(Settings())
    inventory.upsert_pod({**pod("p", "n2", 2), "metadata": {"namespace": "ns", "name": "p", "resourceVersion": "b"}})
    inventory.upsert_pod({**pod("q", "n2", 2), "metadata": {"namespace": "ns", "name": "q", "resourceVersion": "c"}})
    inventory.replace_pods(
        [{**pod("p", "n1", 2), "metadata": {"namespace": "ns", "name": "p", "resourceVersion": "a"}}], list_version="z"
    )
    assert set(inventory.pods) == {("ns", "p")} and inventory.pods[("ns", "p")].node == "n1"


def test_a_node_heartbeat_changes_nothing_but_taints_readiness_and_gpus_do() -> None:
    inventory = Inventory(Settings())
    assert inventory.upsert_node(versioned(node("n1"), 1))
    assert not inventory.upsert_node(versioned(node("n1"), 2))  # a new heartbeat time, nothing placement sees
    assert inventory.upsert_node(versioned(node("n1", 4), 3))
    assert inventory.upsert_node(versioned(node("n1", 4, ready=False), 4))
    assert inventory.upsert_node(
        versioned(node("n1", 4, ready=False, taints=[{"key": "k", "effect": "NoSchedule"}]), 5)
    )
    assert not inventory.upsert_node(versioned(node("n1"), 4))  # older than what we hold
    assert inventory.delete_node("n1", "6") and not inventory.delete_node("n1", "7")


def test_a_node_relist_reports_the_nodes_it_changed_or_removed() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([versioned(node("same"), 3), versioned(node("shrunk"), 3), versioned(node("gone"), 3)], "3")
    inventory.upsert_node(versioned(node("joined-after"), 12))
    changed = inventory.replace_nodes([versioned(node("same"), 3), versioned(node("shrunk", 2), 8)], list_version="10")
    assert sorted(changed) == ["gone", "shrunk"]
    assert set(inventory.nodes) == {"same", "shrunk", "joined-after"}


def test_only_what_placement_and_lifecycle_read_is_kept_of_a_pod() -> None:
    inventory = Inventory(Settings())
    theirs = pod("web", "n1", 0, phase="Failed", labels={"app": "web", "pod-template-hash": "abc"})
    theirs["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 1, "message": "x" * 4096}}}]
    record = inventory.upsert_pod(theirs)
    assert record is not None and record.labels == {} and record.termination_message is None
    ours = pod("w", "n1", 1, labels={**OURS, "app": "trainer"})
    ours_record = inventory.upsert_pod(ours)
    assert ours_record is not None and ours_record.labels == OURS
    assert not hasattr(record, "__dict__")  # slots: no per-instance dictionary


def _gpu_container(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}


@pytest.mark.parametrize(
    ("init_containers", "containers", "held"),
    [
        # An init container runs alone: the larger of it and the app containers.
        ([_gpu_container("init", 7)], [_gpu_container("app", 1)], 7),
        ([_gpu_container("init", 1)], [_gpu_container("app", 2), _gpu_container("side", 3)], 5),
        # A restartable init container (a sidecar) runs beside the app containers: it adds up.
        ([_gpu_container("sidecar", 2, restartPolicy="Always")], [_gpu_container("app", 1)], 3),
        # An init container after a sidecar runs beside it.
        (
            [_gpu_container("sidecar", 2, restartPolicy="Always"), _gpu_container("init", 5)],
            [_gpu_container("app", 1)],
            7,
        ),
        # An init container before a sidecar does not.
        (
            [_gpu_container("init", 4), _gpu_container("sidecar", 2, restartPolicy="Always")],
            [_gpu_container("app", 1)],
            4,
        ),
    ],
)
def test_gpus_are_counted_as_kube_scheduler_counts_them(
    init_containers: list[dict[str, Any]], containers: list[dict[str, Any]], held: int
) -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1")])
    obj = pod("p", "n1", 0)
    obj["spec"].update(initContainers=init_containers, containers=containers)
    inventory.upsert_pod(obj)
    assert inventory.used_gpus("n1") == held


def _pinned(name: str, node_name: str, gpus: int, pod_labels: dict[str, str]) -> dict[str, Any]:
    obj = pod(name, None, gpus, phase="Pending", labels=pod_labels)
    obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name, "no-such-label": "x"}
    return obj


def test_only_our_unbound_workers_hold_the_gpus_of_the_node_they_are_pinned_to() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("n2")])
    # Anyone's Pending pod pinned to a node holds nothing there until it binds, as kube-scheduler
    # sees it: a user who may create pods could otherwise pin a never-bindable one to every node.
    inventory.upsert_pod(_pinned("theirs", "n1", 8, {}))
    inventory.upsert_pod(_pinned("theirs-lookalike", "n1", 8, {"aisched.io/rank": "0"}))
    assert inventory.used_gpus("n1") == 0
    inventory.upsert_pod(_pinned("worker", "n2", 8, {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"}))
    assert inventory.used_gpus("n2") == 8
    assert [p.name for p in inventory.pods_on_node("n2")] == ["worker"]
