"""Topology as data: presets, levels of one's own, placement in them, and the refusal of levels the cluster lacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aisched.api.training_job import TopologySpec
from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.policy.level_refusals import (
    TOPOLOGY_LEVEL_NOT_LABELLED,
    TOPOLOGY_LEVELS_OUT_OF_ORDER,
    UNKNOWN_TOPOLOGY_LEVEL,
    level_refusal,
)
from aisched.policy.nodes import NodeLabelKeys, node_from_labels
from aisched.policy.placement import GangRequest, Placement, Unplaceable, place_gang
from aisched.policy.topology import LOCAL_TOPOLOGY, PRESETS, LevelKey, Topology, UnknownLevelError
from aisched.settings import Settings, TopologySettings, describe_settings_error

AWS = Topology(PRESETS["aws"])
GKE = Topology(PRESETS["gke"])


def keys(topology: Topology) -> NodeLabelKeys:
    return NodeLabelKeys(topology, "nvidia.com/gpu.product", {}, frozenset())


def node(name: str, labels: dict[str, str], topology: Topology, gpus: int = 8) -> Node:
    return node_from_labels(
        name, labels=labels, taints=(), allocatable_gpus=gpus, used_gpus=0, schedulable=True, keys=keys(topology)
    )


def test_presets_read_the_labels_each_cloud_sets() -> None:
    assert {k.name: k.node_label for k in PRESETS["aws"]} == {
        "Zone": "topology.kubernetes.io/zone",
        "NetworkLayer1": "topology.k8s.aws/network-node-layer-1",
        "NetworkLayer2": "topology.k8s.aws/network-node-layer-2",
        "NetworkLayer3": "topology.k8s.aws/network-node-layer-3",
        "NVLinkDomain": "nvidia.com/gpu.clique",
    }
    assert [k.node_label for k in PRESETS["gke"]][1:] == [
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gce-topology-subblock",
        "nvidia.com/gpu.clique",
        "cloud.google.com/gce-topology-host",
    ]
    assert [k.node_label for k in PRESETS["nvidia"]] == ["topology.kubernetes.io/zone", "nvidia.com/gpu.clique"]
    assert LOCAL_TOPOLOGY.names == ("Node", "NVLinkDomain", "Rack", "Zone")


def test_every_preset_the_settings_offer_exists_and_the_default_sets_no_label_of_ours() -> None:
    offered = TopologySettings.model_fields["preset"].annotation
    assert set(offered.__args__) == set(PRESETS)  # type: ignore[union-attr]
    default = TopologySettings().resolved()
    assert not any(k.node_label.startswith("aisched.io/") for k in default.keys)


def test_levels_of_ones_own_replace_the_preset() -> None:
    settings = TopologySettings(preset="aws", levels=[{"name": "Pod", "nodeLabel": "example.com/pod"}])
    topology = settings.resolved()
    assert topology.names == ("Node", "Pod")
    assert topology.node_label(topology.level("pod")) == "example.com/pod"  # names match case aside


def test_bad_levels_stop_the_operator_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AISCHED_TOPOLOGY__LEVELS", '[{"name": "Zone", "nodeLabel": "a/z"}, {"name": "zone", "nodeLabel": "b/z"}]'
    )
    with pytest.raises(ValidationError) as error:
        Settings()
    [line] = describe_settings_error(error.value, {"AISCHED_TOPOLOGY__LEVELS": "..."})
    assert line.startswith("AISCHED_TOPOLOGY__LEVELS: topology level names must differ")


@pytest.mark.parametrize(
    "levels",
    [
        [LevelKey("Rack", "a/rack"), LevelKey("rack", "b/rack")],  # names that differ only in case
        [LevelKey("Rack", "a/rack"), LevelKey("Block", "a/rack")],  # one label, two levels
        [LevelKey("Node", "a/host")],  # Node is the node's
    ],
)
def test_a_topology_whose_levels_clash_is_refused(levels: list[LevelKey]) -> None:
    with pytest.raises(ValueError, match=r"must differ|same node label"):
        Topology(levels)


def test_a_level_name_jobs_could_not_write_or_a_label_that_is_none_is_refused() -> None:
    with pytest.raises(ValueError, match="level name"):
        LevelKey("rack 3", "a/rack")
    with pytest.raises(ValueError, match="not a node label key"):
        LevelKey("Rack", "a//rack")


def test_ranks_run_from_the_node_to_the_widest_level() -> None:
    assert [level.name for level in AWS.levels] == [
        "Node",
        "NVLinkDomain",
        "NetworkLayer3",
        "NetworkLayer2",
        "NetworkLayer1",
        "Zone",
    ]
    assert [level.rank for level in AWS.levels] == [0, 1, 2, 3, 4, 5]
    assert AWS.level("NetworkLayer3") < AWS.level("Zone")
    with pytest.raises(UnknownLevelError, match="its levels are Node, NVLinkDomain, NetworkLayer3"):
        AWS.level("Rack")


def aws_node(
    name: str, layers: tuple[str, str, str], zone: str = "us-east-1a", clique: str | None = None, gpus: int = 8
) -> Node:
    labels = {"topology.kubernetes.io/zone": zone}
    labels |= {f"topology.k8s.aws/network-node-layer-{i}": v for i, v in enumerate(layers, start=1)}
    if clique is not None:
        labels["nvidia.com/gpu.clique"] = clique
    return node(name, labels, AWS, gpus)


def test_a_gang_lands_in_the_tightest_network_layer_of_the_aws_preset() -> None:
    nodes = [
        aws_node("a", ("nn-1", "nn-10", "nn-100")),
        aws_node("b", ("nn-1", "nn-10", "nn-101")),
        aws_node("c", ("nn-1", "nn-11", "nn-110")),
        aws_node("d", ("nn-1", "nn-11", "nn-110")),
    ]
    snapshot = ClusterSnapshot(nodes, AWS)
    placement = place_gang(GangRequest(2, 8), snapshot)
    assert isinstance(placement, Placement)
    assert (placement.level, set(placement.nodes)) == (AWS.level("NetworkLayer3"), {"c", "d"})
    assert placement.to_status().level == "NetworkLayer3"
    assert placement.to_status().domain == "nn-110"
    snapshot.allocate({"c": 8})
    wider = place_gang(GangRequest(2, 8, required_level=AWS.level("NetworkLayer2")), snapshot)
    assert isinstance(wider, Placement) and set(wider.nodes) == {"a", "b"}
    too_tight = place_gang(GangRequest(2, 8, required_level=AWS.level("NetworkLayer3")), snapshot)
    assert isinstance(too_tight, Unplaceable)


def test_a_gang_of_ultraserver_nodes_lands_in_one_nvlink_clique_of_the_aws_preset() -> None:
    # P6e-GB200 nodes (4 GPUs) under one switch, in two cliques of GPU Feature Discovery.
    layers = ("nn-1", "nn-10", "nn-100")
    nodes = [
        aws_node("a", layers, clique="fabric-1.0", gpus=4),
        aws_node("b", layers, clique="fabric-1.1", gpus=4),
        aws_node("c", layers, clique="fabric-1.0", gpus=4),
    ]
    snapshot = ClusterSnapshot(nodes, AWS)
    assert AWS.level("NVLinkDomain") in snapshot.labelled_levels()
    placement = place_gang(GangRequest(2, 4, required_level=AWS.level("NVLinkDomain")), snapshot)
    assert isinstance(placement, Placement)
    assert (placement.level, set(placement.nodes)) == (AWS.level("NVLinkDomain"), {"a", "c"})
    assert placement.to_status().domain == "fabric-1.0"
    snapshot.allocate({"a": 4})
    split = place_gang(GangRequest(2, 4, required_level=AWS.level("NVLinkDomain")), snapshot)
    assert isinstance(split, Unplaceable)  # b and c share the switch, not the NVLink fabric


def test_gke_nvlink_cliques_sit_in_subblocks_and_hold_hosts() -> None:
    labels = {
        "topology.kubernetes.io/zone": "us-central1-a",
        "cloud.google.com/gce-topology-block": "b1",
        "cloud.google.com/gce-topology-subblock": "s1",
        "nvidia.com/gpu.clique": "fabric-7.0",
        "cloud.google.com/gce-topology-host": "h1",
    }
    read = node("gke-a4x-1", labels, GKE, gpus=4)
    assert read.domains == ("us-central1-a", "b1", "s1", "fabric-7.0", "h1")
    assert GKE.level("Subblock") > GKE.level("NVLinkDomain") > GKE.level("Host")
    assert read.path(GKE.level("NVLinkDomain")) == ("us-central1-a", "b1", "s1", "fabric-7.0")


def test_gke_hosts_sit_in_subblocks_in_blocks() -> None:
    labels = {
        "topology.kubernetes.io/zone": "us-central1-a",
        "cloud.google.com/gce-topology-block": "b1",
        "cloud.google.com/gce-topology-subblock": "s1",
        "cloud.google.com/gce-topology-host": "h1",
    }
    read = node("gke-a3-1", labels, GKE)
    # No NVLink clique on an A3 (its NVLink ends at the host): the host still groups its nodes.
    assert read.domains == ("us-central1-a", "b1", "s1", None, "h1")
    assert read.path(GKE.level("NVLinkDomain")) is None
    assert read.path(GKE.level("Host")) == ("us-central1-a", "b1", "s1", None, "h1")
    assert read.path(GKE.level("Subblock")) == ("us-central1-a", "b1", "s1")
    assert read.label(GKE.node) == "gke-a3-1"


def spec(required: str | None = None, preferred: str | None = None) -> TopologySpec:
    return TopologySpec(required_level=required, preferred_level=preferred)


def test_a_level_the_topology_lacks_is_refused_naming_those_it_has() -> None:
    refusal = level_refusal(spec("Rack"), AWS, AWS.grouping)
    assert refusal is not None and refusal.reason == UNKNOWN_TOPOLOGY_LEVEL
    assert "requiredLevel Rack is not a level" in refusal.message
    assert "Node, NVLinkDomain, NetworkLayer3, NetworkLayer2, NetworkLayer1, Zone" in refusal.message
    preferred = level_refusal(spec(preferred="Spine"), AWS, AWS.grouping)
    assert preferred is not None and preferred.reason == UNKNOWN_TOPOLOGY_LEVEL


def test_a_required_level_no_node_is_labelled_with_is_refused_at_once() -> None:
    # An EKS cluster whose instances report no network topology: only zones are labelled.
    snapshot = ClusterSnapshot([node("a", {"topology.kubernetes.io/zone": "z"}, AWS)], AWS)
    assert snapshot.labelled_levels() == (AWS.level("Zone"),)
    refusal = level_refusal(spec("NetworkLayer3"), AWS, snapshot.labelled_levels())
    assert refusal is not None and refusal.reason == TOPOLOGY_LEVEL_NOT_LABELLED
    assert "topology.k8s.aws/network-node-layer-3" in refusal.message
    # A preferred level is a wish, the node level is always there, and a labelled one is fine.
    assert level_refusal(spec("Zone", "NetworkLayer3"), AWS, snapshot.labelled_levels()) is None
    assert level_refusal(spec("Node"), AWS, ()) is None
    assert level_refusal(spec(), AWS, ()) is None


def test_a_preferred_level_wider_than_the_required_one_is_refused() -> None:
    refusal = level_refusal(spec("Node", "Zone"), LOCAL_TOPOLOGY, LOCAL_TOPOLOGY.grouping)
    assert refusal is not None and refusal.reason == TOPOLOGY_LEVELS_OUT_OF_ORDER
    assert level_refusal(spec("zone", "rack"), LOCAL_TOPOLOGY, LOCAL_TOPOLOGY.grouping) is None


def test_a_node_read_with_more_labels_than_the_snapshot_has_levels_is_refused() -> None:
    with pytest.raises(ValueError, match="domain labels"):
        ClusterSnapshot([Node("a", 8, domains=("z", "r", "c", "extra"))])
