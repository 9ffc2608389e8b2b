"""The forecast's steps as slots a chunked run picks from, and the chunks a choice of slots makes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aisched.policy.carbon.forecast import EPS_S, Forecast
from aisched.policy.carbon.offsets import OffsetJob


@dataclass(frozen=True)
class Slots:
    """The forecast steps between now and the end bound, clipped at both ends."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    costs: tuple[float, ...]  # integral over the slot, g/kWh * s

    @property
    def lengths(self) -> list[float]:
        return [b - a for a, b in zip(self.starts, self.ends, strict=True)]

    @classmethod
    def between(cls, fc: Forecast, begin: float, end: float) -> Slots:
        step = fc.step_seconds
        starts, ends, costs = [], [], []
        k = math.floor(begin / step + EPS_S)
        while k * step < end - EPS_S:
            a, b = max(begin, k * step), min(end, (k + 1) * step)
            if b - a > EPS_S:
                starts.append(a)
                ends.append(b)
                costs.append(fc.values[k] * (b - a))
            k += 1
        return cls(tuple(starts), tuple(ends), tuple(costs))


def chunks_from_selection(slots: Slots, selected: Sequence[int]) -> list[tuple[float, float]]:
    chunks: list[tuple[float, float]] = []
    for i in sorted(selected):
        if chunks and abs(chunks[-1][1] - slots.starts[i]) <= EPS_S:
            chunks[-1] = (chunks[-1][0], slots.ends[i])
        else:
            chunks.append((slots.starts[i], slots.ends[i]))
    return chunks


def trim_to_work(chunks: Sequence[tuple[float, float]], job: OffsetJob) -> list[tuple[float, float]] | None:
    """Cut the tail so the chunks do exactly the job's work; None if they cannot."""
    done = 0.0
    out: list[tuple[float, float]] = []
    for a, b in chunks:
        lead = job.overhead if out else job.first_overhead(a)
        useful = (b - a) - lead
        if useful <= EPS_S:
            continue
        if done + useful >= job.work - EPS_S:
            out.append((a, a + lead + (job.work - done)))
            return out
        out.append((a, b))
        done += useful
    return None
