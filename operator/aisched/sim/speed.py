"""How fast a simulated job runs where its workers are: measured node factors, assumed rack and zone ones.

Source: the Pollux (OSDI 2021) step-time measurements in `../shared/data/placement/pollux/<model>.csv`
(16 nodes x 4 NVIDIA T4; one row per placement and per-GPU batch size). For each model the
*cross-node factor* is the median, over every placement of 2 to 4 GPUs that uses more than one node
and every per-GPU batch size measured for both, of its step time over the step time of the same GPUs
on one node. Read that way: bert 2.1x, yolov3 1.8x, ncf 1.8x, cifar10 1.1x, imagenet 1.1x,
deepspeech2 1.1x.

What is modelled, and what is assumed (no public measurement covers it):

- A job whose workers use more nodes than it needs (`ceil(gpus / gpus per node)`) runs slower by its
  model's cross-node factor when it could have been on one node. When it needs several nodes anyway,
  its traffic already crosses the network; each unneeded node adds a share of the factor:
  `1 + (factor - 1) * (extra nodes / nodes used)`. That interpolation is an assumption.
- Racks and zones: a job spread over more racks (zones) than it needs runs slower by `rack_factor`
  (`zone_factor`). Defaults 1.1 and 1.5 are assumptions, not measurements; the benchmark also
  reports every figure with both at 1.0.
- A model's factor does not depend on the job's size beyond that, nor on other jobs' traffic
  (no contention), nor on the GPU type.
- Jobs of traces that name no model get one from `ModelMix`: uniform over the measured models,
  drawn with a seeded `random.Random` in arrival order.

How fast a job runs on more or fewer GPUs than it asked for (an elastic job aisched resized) is
`aisched.sim.scaling`'s part; this module only says what its placement costs.
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aisched.policy.cluster import ClusterSnapshot

DEFAULT_RACK_FACTOR = 1.1
DEFAULT_ZONE_FACTOR = 1.5
_LARGEST_MEASURED_GANG = 4  # the measurements' nodes have 4 GPUs


def cross_node_factors(directory: Path) -> dict[str, float]:
    """Each model's cross-node factor from the Pollux `<model>.csv` files in `directory`."""
    factors = {}
    for path in sorted(directory.glob("*.csv")):
        factor = cross_node_factor(_step_times(path))
        if factor is not None:
            factors[path.stem] = factor
    if not factors:
        raise ValueError(f"{directory}: no Pollux placement CSVs (placement,local_bsz,step_time,...)")
    return factors


def _step_times(path: Path) -> dict[str, dict[int, float]]:
    times: dict[str, dict[int, float]] = defaultdict(dict)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            times[row["placement"]][int(row["local_bsz"])] = float(row["step_time"])
    return times


def cross_node_factor(step_times: Mapping[str, Mapping[int, float]]) -> float | None:
    """Median of spread step time over one-node step time, same GPUs and per-GPU batch size."""
    ratios: list[float] = []
    for placement, by_batch in step_times.items():
        gpus = sum(int(d) for d in placement)
        consolidated = step_times.get(str(gpus))
        if len(placement) < 2 or gpus > _LARGEST_MEASURED_GANG or consolidated is None:
            continue
        ratios.extend(by_batch[b] / consolidated[b] for b in by_batch.keys() & consolidated.keys())
    return statistics.median(ratios) if ratios else None


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """Slowdown of a placement against the consolidated one, per model."""

    node_factors: Mapping[str, float]
    rack_factor: float = DEFAULT_RACK_FACTOR
    zone_factor: float = DEFAULT_ZONE_FACTOR

    @classmethod
    def uniform(cls) -> SpeedModel:
        """Every placement as fast as any other: the simulator as it was before placement mattered."""
        return cls({}, rack_factor=1.0, zone_factor=1.0)

    def slowdown(self, model: str, nodes: Sequence[str], gpus: int, geometry: Geometry) -> float:
        used = set(nodes)
        needed = math.ceil(gpus / geometry.gpus_per_node)
        factor = 1.0
        node_factor = self.node_factors.get(model, 1.0)
        if len(used) > needed:
            extra_share = 1.0 if needed == 1 else (len(used) - needed) / len(used)
            factor *= 1 + (node_factor - 1) * extra_share
        if len({geometry.rack[n] for n in used}) > math.ceil(needed / geometry.nodes_per_rack):
            factor *= self.rack_factor
        if len({geometry.zone[n] for n in used}) > math.ceil(needed / geometry.nodes_per_zone):
            factor *= self.zone_factor
        return factor


class Geometry:
    """What the speed model reads of a cluster, worked out once: node size, each node's rack and zone."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        nodes = list(snapshot.nodes())
        self.gpus_per_node = max(snapshot.max_gpus_per_node, 1)
        rack = snapshot.topology.find("Rack")  # the simulator's clusters have the local topology
        self.rack = {n.name: (n.label(rack) if rack else None) or n.name for n in nodes}
        self.zone = {n.name: n.zone or "" for n in nodes}
        self.nodes_per_rack = max(Counter(self.rack.values()).values(), default=1)
        self.nodes_per_zone = max(Counter(self.zone.values()).values(), default=1)


@dataclass(slots=True)
class ModelMix:
    """Models for jobs whose trace names none: uniform over `models`, seeded, in the order asked."""

    models: Sequence[str]
    seed: int = 0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def draw(self) -> str:
        return self._rng.choice(sorted(self.models)) if self.models else ""
