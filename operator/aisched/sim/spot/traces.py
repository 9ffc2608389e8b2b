"""Spot availability traces: how many spot instances of one kind one zone could offer, sample by sample.

The format is the one of skypilot-org/spot-traces ("Can't Be Late", Wu et al., NSDI 2024)::

    {"metadata": {"gap_seconds": 195}, "data": [1, 1, 0, ...]}

where each sample counts the instances that could be had (0 or 1 in the single-node traces,
up to 16 in the multi-node ones). The files name their zone only in their file names, whose
pattern differs between the publisher's tree and copies of it, so the zone is read from the
metadata (`"zone"`, for traces that carry one) or given by the caller, never parsed out of a
file name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aisched.policy.interruptions import PoolHistory


class SpotTraceError(ValueError):
    """A spot trace cannot be read or used; the message names the file."""


@dataclass(frozen=True)
class SpotTrace:
    name: str
    gap_s: float
    available: tuple[bool, ...]
    # Prefix sums, so a pool's history up to any sample is O(1).
    _available_before: tuple[int, ...] = field(repr=False)
    _losses_before: tuple[int, ...] = field(repr=False)

    @classmethod
    def build(cls, name: str, gap_s: float, samples: Sequence[int], instances: int = 1) -> SpotTrace:
        """A job that needs INSTANCES spot instances at once can run where a sample counts that many."""
        available = tuple(sample >= instances for sample in samples)
        available_before, losses_before = [0], [0]
        for index, up in enumerate(available):
            available_before.append(available_before[-1] + up)
            lost = index > 0 and available[index - 1] and not up
            losses_before.append(losses_before[-1] + lost)
        return cls(name, gap_s, available, tuple(available_before), tuple(losses_before))

    @classmethod
    def load(cls, path: Path, zone: str | None = None, instances: int = 1) -> SpotTrace:
        """The trace in PATH, named by ZONE, else by the zone its metadata names."""
        try:
            document = json.loads(path.read_text())
            metadata, samples = document["metadata"], document["data"]
            gap_s = float(metadata["gap_seconds"])
        except OSError as error:
            raise SpotTraceError(f"{path}: {error.strerror or error}") from error
        except (ValueError, TypeError, KeyError) as error:
            raise SpotTraceError(f"{path}: not a spot trace (metadata.gap_seconds and data): {error}") from error
        zone = zone or metadata.get("zone")
        if not zone:
            raise SpotTraceError(f"{path}: its metadata names no zone; say which with --zone")
        if instances > 1 and max(samples, default=0) < instances:
            raise SpotTraceError(f"{path}: never {instances} instances at once (at most {max(samples, default=0)})")
        return cls.build(str(zone), gap_s, samples, instances)

    def at(self, index: int) -> bool:
        # Beyond the trace's end, assume no spot: never in the policies' favour.
        return self.available[index] if index < len(self.available) else False

    def history_before(self, index: int) -> PoolHistory:
        """What an operator watching this pool from the trace's start knows at sample `index`."""
        index = min(index, len(self.available))
        return PoolHistory(
            interruptions=float(self._losses_before[index]),
            exposure_s=self._available_before[index] * self.gap_s,
        )

    @property
    def availability(self) -> float:
        return sum(self.available) / len(self.available)
