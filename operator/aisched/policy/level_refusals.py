"""A job that names topology levels the cluster cannot give: refused at once, with a condition that says why.

Levels are configuration (`Topology`), so the API server cannot check them: a job
asking for `Rack` on a cluster whose topology has no Rack, or whose nodes carry no
label of that level, would otherwise wait Queued for ever behind a message about
room. Checked before the job enters a scheduling cycle; the job is tried again on
the scheduler's backoff and at once when its spec changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from aisched.api.training_job import TopologySpec
from aisched.policy.tenancy import Refusal
from aisched.policy.topology import Level, Topology

UNKNOWN_TOPOLOGY_LEVEL = "UnknownTopologyLevel"
TOPOLOGY_LEVEL_NOT_LABELLED = "TopologyLevelNotLabelled"
TOPOLOGY_LEVELS_OUT_OF_ORDER = "TopologyLevelsOutOfOrder"


def level_refusal(spec: TopologySpec, topology: Topology, labelled: Iterable[Level]) -> Refusal | None:
    """Why the cluster cannot give what SPEC asks, or None.

    LABELLED are the grouping levels at least one usable node carries a label of
    (`ClusterSnapshot.labelled_levels`). A preferred level no node is labelled with
    is only a wish the search skips; a required one would keep the job waiting for ever.
    """
    found: dict[str, Level] = {}
    for field, name in (("requiredLevel", spec.required_level), ("preferredLevel", spec.preferred_level)):
        if name is None:
            continue
        level = topology.find(name)
        if level is None:
            return Refusal(
                UNKNOWN_TOPOLOGY_LEVEL,
                f"topology.{field} {name} is not a level of this cluster's topology; "
                f"its levels are {', '.join(topology.names)} (tightest first)",
            )
        found[field] = level
    required, preferred = found.get("requiredLevel"), found.get("preferredLevel")
    if required is not None and preferred is not None and preferred.rank > required.rank:
        return Refusal(
            TOPOLOGY_LEVELS_OUT_OF_ORDER,
            f"topology.preferredLevel {preferred} is wider than requiredLevel {required}; "
            f"levels from the tightest: {', '.join(topology.names)}",
        )
    if required is not None and not required.is_node and required not in set(labelled):
        return Refusal(
            TOPOLOGY_LEVEL_NOT_LABELLED,
            f"topology.requiredLevel {required} needs nodes labelled {topology.node_label(required)}, "
            "and no schedulable GPU node carries that label",
        )
    return None
