"""Topology as data: the ordered node labels that group GPU nodes into domains.

As in Kueue's Topology, a topology is a list of levels from the widest to the
tightest, each a name (what a TrainingJob writes in `topology.requiredLevel`)
and the node label whose value names a node's domain at that level. The node
itself is always the tightest level, named `Node`. Presets hold the labels the
clouds and NVIDIA's GPU Feature Discovery really set; the operator's settings
pick one or list levels of their own.

A domain is identified by its *path*: the label values from the widest level
down to its own, so two racks that share a label value in different zones stay
apart. A node without a label at some level is in no domain of that level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aisched.api.common import NODE_LEVEL

CLUSTER_RANK = 1_000
"""The rank of the whole cluster: wider than any level of any topology."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,62}$")
# A qualified label key: an optional DNS-subdomain prefix and a name of at most 63 characters.
_LABEL = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class LevelKey:
    """One level as configured: the name jobs use and the node label that says each node's domain."""

    name: str
    node_label: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"level name {self.name!r}: a letter, then letters, digits or '-' (at most 63)")
        if not _LABEL.match(self.node_label):
            raise ValueError(f"level {self.name}: {self.node_label!r} is not a node label key")


@dataclass(frozen=True, slots=True, order=True)
class Level:
    """A level of one topology, knowing where it sits: levels compare by rank alone."""

    rank: int
    """0 for the node, counting up towards the widest level: smaller is tighter."""
    depth: int
    """How many labels a domain path of this level holds (1 for the widest; the node's path is the longest)."""
    name: str

    @property
    def is_node(self) -> bool:
        return self.rank == 0

    def __str__(self) -> str:
        return self.name


def level_rank(level: Level | None) -> int:
    """The level's rank; None (the whole cluster) is wider than every level."""
    return CLUSTER_RANK if level is None else level.rank


@dataclass(frozen=True, slots=True)
class DomainId:
    """A topology domain: its level (None for the whole cluster) and its path of labels from the widest level down."""

    level: Level | None
    path: tuple[str | None, ...]

    @property
    def label(self) -> str:
        if self.level is None:
            return "cluster"
        return str(self.path[-1])

    def contains(self, other: DomainId) -> bool:
        return other.path[: len(self.path)] == self.path and level_rank(other.level) <= level_rank(self.level)


class UnknownLevelError(ValueError):
    """A level name the topology does not have; the message lists those it has."""


class Topology:
    """The ordered levels of one cluster, from the configured keys (widest first)."""

    __slots__ = ("_by_name", "grouping", "keys", "levels", "node")

    def __init__(self, keys: Sequence[LevelKey]) -> None:
        self.keys: tuple[LevelKey, ...] = tuple(keys)
        names = [k.name.lower() for k in self.keys] + [NODE_LEVEL.lower()]
        if len(set(names)) != len(names):
            raise ValueError(f"topology level names must differ (and {NODE_LEVEL} is the node's): {names}")
        labels = [k.node_label for k in self.keys]
        if len(set(labels)) != len(labels):
            raise ValueError(f"two topology levels read the same node label: {labels}")
        count = len(self.keys)
        self.node = Level(0, count + 1, NODE_LEVEL)
        self.grouping: tuple[Level, ...] = tuple(
            Level(count - index, index + 1, key.name) for index, key in reversed(list(enumerate(self.keys)))
        )
        """Levels whose domains group several nodes, tightest first."""
        self.levels: tuple[Level, ...] = (self.node, *self.grouping)
        """Every level, the node first."""
        self._by_name = {level.name.lower(): level for level in self.levels}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Topology) and other.keys == self.keys

    def __hash__(self) -> int:
        return hash(self.keys)

    def __repr__(self) -> str:
        return f"Topology({', '.join(f'{k.name}={k.node_label}' for k in self.keys)})"

    @property
    def names(self) -> tuple[str, ...]:
        """Level names, tightest first."""
        return tuple(level.name for level in self.levels)

    def find(self, name: str) -> Level | None:
        """The level a job names (case aside), or None."""
        return self._by_name.get(name.lower())

    def level(self, name: str) -> Level:
        level = self.find(name)
        if level is None:
            raise UnknownLevelError(
                f"{name!r} is not a topology level of this cluster; its levels are {', '.join(self.names)}"
            )
        return level

    def node_label(self, level: Level) -> str:
        """The node label a grouping level reads."""
        return self.keys[level.depth - 1].node_label

    def domain_labels(self, labels: Mapping[str, str]) -> tuple[str | None, ...]:
        """A node's domain at each grouping level, widest first, from its labels."""
        return tuple(labels.get(key.node_label) for key in self.keys)


def _keys(*pairs: tuple[str, str]) -> tuple[LevelKey, ...]:
    return tuple(LevelKey(name, label) for name, label in pairs)


ZONE_LABEL = "topology.kubernetes.io/zone"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
LOCAL_RACK_LABEL = "aisched.io/rack"

PRESETS: Mapping[str, tuple[LevelKey, ...]] = {
    # Zones and NVLink domains: what every cloud and GPU Feature Discovery label (GFD sets the
    # clique on multi-node NVLink systems such as GB200 NVL72; elsewhere the level stays empty).
    "nvidia": _keys(("Zone", ZONE_LABEL), ("NVLinkDomain", CLIQUE_LABEL)),
    # EKS: the EC2 instance topology labels, layer 1 the farthest from the instance, layer 3 its
    # switch; then GFD's NVLink clique, which P6e-GB200 UltraServers' nodes carry (a clique is one
    # NVLink partition of an UltraServer, topology.k8s.aws/ultraserver-id, and may be smaller).
    "aws": _keys(
        ("Zone", ZONE_LABEL),
        ("NetworkLayer1", "topology.k8s.aws/network-node-layer-1"),
        ("NetworkLayer2", "topology.k8s.aws/network-node-layer-2"),
        ("NetworkLayer3", "topology.k8s.aws/network-node-layer-3"),
        ("NVLinkDomain", CLIQUE_LABEL),
    ),
    # GKE: the compact-placement labels of A3/A4 nodes (a block holds sub-blocks, one rack each, of
    # hosts); on A4X (GB200) a sub-block is one NVL72 rack, split by GFD's clique into NVLink partitions.
    "gke": _keys(
        ("Zone", ZONE_LABEL),
        ("Block", "cloud.google.com/gce-topology-block"),
        ("Subblock", "cloud.google.com/gce-topology-subblock"),
        ("NVLinkDomain", CLIQUE_LABEL),
        ("Host", "cloud.google.com/gce-topology-host"),
    ),
    # The local cluster (hack/clusters/*.yaml) and the simulator: racks carry aisched.io/rack.
    "local": _keys(("Zone", ZONE_LABEL), ("Rack", LOCAL_RACK_LABEL), ("NVLinkDomain", CLIQUE_LABEL)),
}
"""Named topologies, widest level first."""

LOCAL_TOPOLOGY = Topology(PRESETS["local"])
"""The simulator's and the local cluster's topology: zone, rack, NVLink domain, node."""
