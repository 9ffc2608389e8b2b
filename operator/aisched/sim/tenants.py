"""Tenants as queues: the quotas a trace's teams get, and what each team got of them.

Philly's virtual clusters are teams that shared one cluster, each with its own share of the GPUs.
The trace does not give those shares, so `tenant_queues` sets each team's nominal quota to its
share of the GPU-time the trace asks for (largest remainders, so the quotas add up to the cluster),
all in one cohort, so an idle team's GPUs are lent to the busy ones and reclaimed when it needs them.

`QueueLedger` follows each queue's GPUs as the replay runs: those its running jobs hold and those
its waiting jobs ask for. Its figure is the guarantee shortfall: GPU-seconds a queue held less than
`min(nominal, held + waiting)`, i.e. time it had demand its quota guarantees and did not get it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from aisched.sim.traces import TraceJob

COHORT = "tenants"


def tenant_shares(trace: Sequence[TraceJob], cluster_gpus: int) -> dict[str, int]:
    """Each tenant's nominal GPUs: its share of the trace's GPU-seconds, summing to CLUSTER_GPUS."""
    asked: dict[str, float] = defaultdict(float)
    for job in trace:
        asked[job.tenant] += job.gpus * job.duration
    total = sum(asked.values())
    if total <= 0 or cluster_gpus <= 0:
        return {tenant: 0 for tenant in asked}
    exact = {tenant: cluster_gpus * gpu_seconds / total for tenant, gpu_seconds in asked.items()}
    shares = {tenant: int(value) for tenant, value in exact.items()}
    by_remainder = sorted(exact, key=lambda t: (-(exact[t] - shares[t]), t))
    for tenant in by_remainder[: cluster_gpus - sum(shares.values())]:
        shares[tenant] += 1
    return shares


class QueueLedger:
    """GPUs held and asked for by queue over simulated time, sampled once per cycle."""

    def __init__(self, nominal: Mapping[str, int]) -> None:
        self.nominal = dict(nominal)
        self.held: dict[str, int] = defaultdict(int)
        self.waiting: dict[str, int] = defaultdict(int)
        self.shortfall: dict[str, float] = defaultdict(float)
        self.borrowed: dict[str, float] = defaultdict(float)
        self._last: float | None = None

    def queue_of(self, tenant: str) -> str | None:
        return tenant if tenant in self.nominal else None

    def arrived(self, tenant: str, gpus: int) -> None:
        if (queue := self.queue_of(tenant)) is not None:
            self.waiting[queue] += gpus

    def started(self, tenant: str, asked: int, held: int) -> None:
        """A waiting job (ASKED GPUs) now runs on HELD."""
        if (queue := self.queue_of(tenant)) is not None:
            self.waiting[queue] -= asked
            self.held[queue] += held

    def resized(self, tenant: str, before: int, after: int) -> None:
        if (queue := self.queue_of(tenant)) is not None:
            self.held[queue] += after - before

    def stopped(self, tenant: str, held: int, asked: int) -> None:
        """A running job (HELD GPUs) was preempted and waits again for ASKED."""
        if (queue := self.queue_of(tenant)) is not None:
            self.held[queue] -= held
            self.waiting[queue] += asked

    def finished(self, tenant: str, held: int) -> None:
        if (queue := self.queue_of(tenant)) is not None:
            self.held[queue] -= held

    def advance(self, now: float) -> None:
        """Account the time since the last sample at the state that held over it."""
        if self._last is not None and now > self._last:
            span = now - self._last
            for queue, nominal in self.nominal.items():
                held = self.held[queue]
                owed = min(nominal, held + self.waiting[queue])
                self.shortfall[queue] += max(0, owed - held) * span
                self.borrowed[queue] += max(0, held - nominal) * span
        self._last = now
