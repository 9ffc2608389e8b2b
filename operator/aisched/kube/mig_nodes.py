"""What a Node and a Pod say about MIG: the node's config label, its state, and the instances asked and advertised.

Read once per watch event into plain records (NodeMig, a pod's profiles); the controller
(controller/mig.py) turns them into `policy.sharing.mig_configs.MigNode`. Every value is a
label, annotation or quantity anyone with the right to edit the object may write: malformed ones
read as absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from aisched.kube import labels as our_labels
from aisched.kube.quantities import whole_gpus
from aisched.policy.sharing.mig_configs import CONFIG_LABEL, STATE_LABEL

MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"  # GPU Feature Discovery: the board's GPUs, MIG or not
CORDONED_ANNOTATION: Final = f"{our_labels.PREFIX}/mig-repartition"
"""On a node the operator cordoned to repartition: the config it set. Only such a node is ever uncordoned by it."""
_PROFILE = re.compile(r"^[1-7]g\.[0-9]{1,4}gb$")
_CONFIG = re.compile(r"^[a-z0-9][a-z0-9.\-]{0,62}$")
_MOST_INSTANCES = 7 * 64  # 7 per GPU, far more GPUs than any node has


@dataclass(frozen=True, slots=True)
class NodeMig:
    config: str | None
    state: str | None
    gpus: int
    allocatable: tuple[tuple[str, int], ...]
    cordoned_for: str | None = None
    """The config the operator cordoned the node to apply (its annotation), so that a restarted one finishes it."""


def read_node_mig(labels: dict[str, str], allocatable: dict[str, Any], annotations: dict[str, str]) -> NodeMig | None:
    """A node's MIG picture; None for a node neither labelled for the MIG manager nor advertising instances."""
    config = labels.get(CONFIG_LABEL)
    config = config if isinstance(config, str) and _CONFIG.match(config) else None
    instances = []
    for resource, amount in allocatable.items():
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX) if isinstance(resource, str) else ""
        if resource != profile and _PROFILE.match(profile):
            instances.append((profile, min(whole_gpus(amount, round_up=False), _MOST_INSTANCES)))
    if config is None and not instances:
        return None
    count = labels.get(GPU_COUNT_LABEL, "")
    gpus = int(count) if count.isascii() and count.isdigit() and len(count) <= 3 else 0
    state = labels.get(STATE_LABEL)
    cordoned_for = annotations.get(CORDONED_ANNOTATION)
    return NodeMig(
        config,
        state if isinstance(state, str) else None,
        gpus,
        tuple(sorted(instances)),
        cordoned_for if isinstance(cordoned_for, str) else None,
    )


def requested_profiles(spec: dict[str, Any]) -> tuple[str, ...]:
    """The MIG profile of each `nvidia.com/mig-<profile>` instance the pod's containers ask, one entry per instance."""
    profiles: list[str] = []
    for container in spec.get("containers") or ():
        resources = container.get("resources") if isinstance(container, dict) else None
        requests = (resources.get("limits") or resources.get("requests")) if isinstance(resources, dict) else None
        for resource, amount in (requests or {}).items() if isinstance(requests, dict) else ():
            profile = resource.removeprefix(MIG_RESOURCE_PREFIX) if isinstance(resource, str) else ""
            if resource != profile and _PROFILE.match(profile):
                profiles += [profile] * min(whole_gpus(amount, round_up=True), _MOST_INSTANCES)
    return tuple(profiles)
