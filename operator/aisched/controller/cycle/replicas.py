"""The InferenceServices' new replicas as a kind of the cycle: their asks in, the answers and reclaims out.

The asks live in the cluster state (`ClusterState.replica_asks`), where each service's pass puts
them; answering them is the first part of a decision carried out, so the GPUs granted are promised
before any gang is launched.
"""

from __future__ import annotations

from aisched.controller.cycle.kind import Asked, CycleView, Decided
from aisched.controller.replica_asks import ReplicaAsks
from aisched.policy.scheduler import JobRequest


class ReplicaAsksKind:
    name = "InferenceService replicas"

    def __init__(self, asks: ReplicaAsks) -> None:
        self._asks = asks

    async def asked(self, view: CycleView) -> Asked[None]:
        return Asked(None, replicas=self._asks.pending())

    async def decided(self, asked: Asked[None], decided: Decided, view: CycleView) -> None:
        self._asks.answer(decided.whole.replicas)  # promised at once: the GPUs granted are no one else's
        self._asks.reclaim(decided.whole.reclaimed)  # replicas a lending queue takes back: their services retire them

    async def blamed(self, asked: Asked[None], request: JobRequest, error: Exception, view: CycleView) -> None:
        raise AssertionError("replica asks are never halved: a decision that raises on them is made without them")
