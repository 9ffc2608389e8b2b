"""How much faster a data-parallel job trains on more GPUs, or slower on fewer, than it asked for.

Needed once jobs are elastic: aisched may start an elastic job with fewer replicas than it asked
for, shrink it back towards them, or grow it into idle GPUs. Peers never resize a job.

Throughput, measured. Source: the Pollux (OSDI 2021) step times in
`../shared/data/placement/pollux/<model>.csv` (nodes of 4 NVIDIA T4). Data-parallel weak scaling:
each GPU keeps its per-GPU batch, so k GPUs process `k * local_bsz / step_time` samples a second.
A model's *per-GPU efficiency* on k GPUs is its throughput per GPU there over that on one GPU, the
median over every per-GPU batch size measured for both, on the most consolidated placement
measured for k (fewest nodes: `4`, `44`, `4444`, ...). Three conservative readings of that data:

- Efficiency never rises with more GPUs: each size takes the lowest efficiency measured at or
  below it (a running minimum). Measurements that say 16 GPUs per GPU beat 8 (bert, where `44`
  measured slower than `4444`) are noise or a quirk of that testbed, and would reward growth.
- Beyond the largest size measured (16 GPUs), the efficiency keeps falling at the rate of the
  last measured doubling (8 to 16 GPUs), per doubling: gains shrink, losses stay near linear.
- Sizes above 4 GPUs crossed nodes in the measurements (4-GPU nodes). On the simulated 8-GPU
  nodes that understates what 8 GPUs on one node do: pessimistic for growth, never optimistic.

Progress, assumed. More throughput from a bigger global batch is not all progress: past some
batch size each sample teaches the model less (statistical efficiency, which Pollux models per
job and which no public measurement gives for these traces). `growth_efficiency` is the share of
the extra throughput that turns into progress. Its default, 0.5, credits growth with half of what
the throughput gain says; Pollux's own measurements show statistical efficiency at twice a job's
batch well above half for most of training, so half is on the safe side. The benchmark also
reports aisched's figures at `PESSIMISTIC_GROWTH_EFFICIENCY`. A job on fewer GPUs than it asked
for loses all its lost throughput (a smaller batch's better statistical efficiency is not
credited) and never runs faster than on what it asked for; a job grown where the measured
throughput falls (4 to 8 GPUs of a communication-heavy model crossed a node of the testbed) runs
slower: the scheduler grows jobs without knowing how they scale.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_GROWTH_EFFICIENCY = 0.5
PESSIMISTIC_GROWTH_EFFICIENCY = 0.25

StepTimes = Mapping[str, Mapping[int, float]]
"""placement -> per-GPU batch size -> seconds per step (Pollux's `<model>.csv`)."""


def per_gpu_efficiency(step_times: StepTimes) -> dict[int, float]:
    """Per-GPU throughput on k GPUs over one GPU's, for each k measured, never rising with k."""
    single = step_times.get("1")
    if not single:
        return {}
    consolidated: dict[int, str] = {}
    for placement in step_times:
        gpus = sum(int(d) for d in placement)
        known = consolidated.get(gpus)
        if known is None or len(placement) < len(known):
            consolidated[gpus] = placement
    efficiency: dict[int, float] = {}
    lowest = 1.0
    for gpus in sorted(consolidated):
        by_batch = step_times[consolidated[gpus]]
        ratios = [single[b] / by_batch[b] for b in by_batch.keys() & single.keys()]
        if not ratios:
            continue
        lowest = min(lowest, statistics.median(ratios))
        efficiency[gpus] = lowest
    return efficiency


def efficiencies(directory: Path) -> dict[str, dict[int, float]]:
    """Each model's per-GPU efficiency curve from the Pollux `<model>.csv` files in `directory`."""
    curves = {}
    for path in sorted(directory.glob("*.csv")):
        times: dict[str, dict[int, float]] = defaultdict(dict)
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                times[row["placement"]][int(row["local_bsz"])] = float(row["step_time"])
        curve = per_gpu_efficiency(times)
        if curve:
            curves[path.stem] = curve
    return curves


@dataclass(frozen=True, slots=True)
class ScalingModel:
    """Each model's throughput by GPUs held, and how much of a gain becomes progress."""

    curves: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    """model -> GPUs -> per-GPU efficiency; a model without a curve scales linearly."""
    growth_efficiency: float = DEFAULT_GROWTH_EFFICIENCY

    def throughput(self, model: str, gpus: int) -> float:
        """Samples a second on `gpus` consolidated GPUs, in one GPU's throughput."""
        return gpus * _efficiency(self.curves.get(model, {}), gpus)

    def pace(self, model: str, asked: int, held: int) -> float:
        """Progress a second on `held` GPUs, in seconds of the job's run on the `asked` ones."""
        if held == asked:
            return 1.0
        ratio = self.throughput(model, held) / self.throughput(model, asked)
        if held < asked:  # never faster on fewer GPUs, whatever the measurements' node boundaries say
            return min(1.0, ratio)
        if ratio <= 1.0:  # grown past a node boundary of the measurements: slower, and all of it counts
            return ratio
        return 1.0 + self.growth_efficiency * (ratio - 1.0)

    def to_json(self) -> dict[str, object]:
        return {
            "growth_efficiency": self.growth_efficiency,
            "per_gpu_efficiency": {m: {k: round(v, 3) for k, v in sorted(c.items())} for m, c in self.curves.items()},
        }


def _efficiency(curve: Mapping[int, float], gpus: int) -> float:
    """Linear between measured sizes; beyond the largest, falling per doubling as the last doubling fell."""
    if not curve or gpus <= 1:
        return 1.0
    sizes = sorted(curve)
    if gpus in curve:
        return curve[gpus]
    largest = sizes[-1]
    if gpus > largest:
        half = largest // 2
        below = curve.get(half, _efficiency(curve, half)) if half >= 1 else 1.0
        per_doubling = min(1.0, curve[largest] / below) if below > 0 else 1.0
        return curve[largest] * float(per_doubling ** math.log2(gpus / largest))
    lower = max([1, *(s for s in sizes if s < gpus)])
    upper = min(s for s in sizes if s > gpus)
    low = curve.get(lower, 1.0)
    share = (gpus - lower) / (upper - lower)
    return low + (curve[upper] - low) * share
