"""The neutral scheduling cycle: every kind asked, one decision, each kind handed its part and only its part.

The kinds here are small recording ones written to the `CycleKind` protocol: the cycle must work
for any kind, so it is tried with kinds that do nothing but say what they were given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from aisched.controller.cluster_state import ClusterState
from aisched.controller.cycle import Asked, CycleView, Decided, ReplicaAsksKind, SchedulingCycle
from aisched.controller.cycle import scheduling as cycle_module
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.decision import decide
from aisched.policy.scheduler import HeldGpus, JobRequest
from aisched.settings import Settings
from tests.builders import a_queue
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import T0, a_node

pytestmark = pytest.mark.asyncio


def a_gang(key: str, gpus: int, *, priority: int = 0, queue: str = "team") -> JobRequest:
    return JobRequest(key=key, queue=queue, priority=priority, created=T0, gpus_per_replica=gpus, replicas=1)


@dataclass
class RecordingKind:
    name: str
    requests: tuple[JobRequest, ...] = ()
    held: tuple[HeldGpus, ...] = ()
    journal: list[str] = field(default_factory=list)
    parts: list[Decided] = field(default_factory=list)
    blamed_keys: list[str] = field(default_factory=list)
    fails: bool = False

    async def asked(self, view: CycleView) -> Asked[str]:
        self.journal.append(f"{self.name} asked")
        return Asked(f"carried by {self.name}", requests=self.requests, held=self.held)

    async def decided(self, asked: Asked[str], decided: Decided, view: CycleView) -> None:
        assert asked.carried == f"carried by {self.name}"
        self.journal.append(f"{self.name} decided")
        self.parts.append(decided)
        if self.fails:
            raise RuntimeError(f"{self.name} cannot carry out its part")

    async def blamed(self, asked: Asked[str], request: JobRequest, error: Exception, view: CycleView) -> None:
        self.blamed_keys.append(request.key)


def a_cycle(kube: KubeDouble, *kinds: Any, nodes: dict[str, int] | None = None) -> tuple[SchedulingCycle, ClusterState]:
    settings = Settings()
    state = ClusterState(Inventory(settings))
    for name, gpus in (nodes or {"n1": 8}).items():
        state.inventory.upsert_node(a_node(name, gpus))
    state.queues["team"] = a_queue("team", nominal_gpus=8).obj()
    kube.allow("patch_status")
    cycle = SchedulingCycle(
        settings=settings,
        state=state,
        kinds=(ReplicaAsksKind(state.replica_asks), *kinds),
        kube=kube.client,
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        provisioner=None,
        clock=lambda: T0,
    )
    return cycle, state


async def test_each_kind_is_asked_in_order_and_handed_only_its_part_of_one_decision(kube: KubeDouble) -> None:
    journal: list[str] = []
    first = RecordingKind("first", (a_gang("ns/a", 8, priority=10),), journal=journal)
    second = RecordingKind("second", (a_gang("ns/b", 8),), journal=journal)
    cycle, _ = a_cycle(kube, first, second)

    await cycle.run()

    assert journal == ["first asked", "second asked", "first decided", "second decided"]
    assert [a.key for a in first.parts[0].part.admitted] == ["ns/a"]
    assert first.parts[0].part.waiting == ()
    assert second.parts[0].part.admitted == ()
    assert [w.key for w in second.parts[0].part.waiting] == ["ns/b"]  # the one node went to the higher priority
    assert first.parts[0].whole is second.parts[0].whole  # one decision for every kind


async def test_what_one_kind_holds_is_charged_to_its_queue_against_another_kinds_gang(kube: KubeDouble) -> None:
    holder = RecordingKind("holder", held=(HeldGpus("team", 8_000),))
    asker = RecordingKind("asker", (a_gang("ns/a", 8),))
    cycle, _ = a_cycle(kube, holder, asker, nodes={"n1": 8, "n2": 8})

    await cycle.run()

    # Free GPUs on n2, but the queue's 8 are held by the other kind's running work.
    assert asker.parts[0].part.admitted == ()
    assert [w.key for w in asker.parts[0].part.waiting] == ["ns/a"]


async def test_a_kind_whose_part_fails_stops_no_kind_after_it(kube: KubeDouble) -> None:
    failing = RecordingKind("failing", (a_gang("ns/a", 4),), fails=True)
    after = RecordingKind("after", (a_gang("ns/b", 4),))
    cycle, state = a_cycle(kube, failing, after)

    await cycle.run()

    assert [a.key for a in after.parts[0].part.admitted] == ["ns/b"]
    assert state.queues["team"]["status"]["usedGPUs"] == 8  # the Queue's usage is written all the same


async def test_a_request_the_scheduler_raises_on_is_its_own_kinds_to_blame_and_the_rest_are_decided(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    def decide_unless_poisoned(snapshot: Any, requests: list[JobRequest], *args: Any, **kwargs: Any) -> Any:
        if any(r.key == "ns/poison" for r in requests):
            raise ValueError("a request no scheduler can read")
        return decide(snapshot, requests, *args, **kwargs)

    monkeypatch.setattr(cycle_module, "decide", decide_unless_poisoned)
    healthy = RecordingKind("healthy", (a_gang("ns/a", 4),))
    poisoned = RecordingKind("poisoned", (a_gang("ns/poison", 1), a_gang("ns/b", 2)))
    cycle, _ = a_cycle(kube, healthy, poisoned)

    await cycle.run()

    assert poisoned.blamed_keys == ["ns/poison"]
    assert healthy.blamed_keys == []
    assert [a.key for a in healthy.parts[0].part.admitted] == ["ns/a"]
    assert [a.key for a in poisoned.parts[0].part.admitted] == ["ns/b"]
