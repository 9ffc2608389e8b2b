"""A fleet of LLM replicas behind a least-loaded balancer, scaled by one autoscaler, over one request trace.

What every autoscaler sees is a `FleetView`: the last scrape (every `scrape_s`) of each ready
replica's gauges (waiting, running, KV usage), the arrival counter's rate over the last minute,
TTFT / TPOT percentiles over the last minute's requests, and the boot times of replicas that became
ready. Nothing of the future. Each acts every `period_s` of its own. Replicas hold a GPU from the
moment they are created; they serve `load_time_s` later. Scale-down retires booting replicas first,
then the ready ones with the fewest requests; a retiring replica takes no new request, finishes
its own and then goes (its GPU counts until then).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aisched.sim.llm.server import Replica, Request, ServerModel
from aisched.sim.llm.trace import TraceRequest

ROUTER_TICK_S = 0.25
LATENCY_WINDOW_S = 60.0
RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class Objectives:
    """A request attains the objectives when both its TTFT and its TPOT are within them."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1
    percentile: float = 0.95


@dataclass(frozen=True)
class ReplicaGauges:
    waiting: int
    running: int
    kv_usage: float


@dataclass(frozen=True)
class FleetView:
    now: float
    ready: tuple[ReplicaGauges, ...]
    booting: int
    arrival_rate: float
    ttft_percentile_s: float | None
    tpot_percentile_s: float | None
    boot_durations_s: tuple[float, ...]
    held_at_service: int

    @property
    def replicas(self) -> int:
        """Ready and booting replicas: what the Deployment's spec.replicas says."""
        return len(self.ready) + self.booting


class Autoscaler(Protocol):
    period_s: float

    def decide(self, view: FleetView) -> int:
        """The replica count wanted now."""
        ...


@dataclass(frozen=True)
class FleetSettings:
    model: ServerModel
    objectives: Objectives = Objectives()
    scrape_s: float = 5.0
    initial_replicas: int = 1


@dataclass
class FleetOutcome:
    slo_attainment: float
    gpu_hours: float
    requests: int
    ttft_p95_s: float
    tpot_p95_s: float
    mean_replicas: float
    max_replicas: int
    scale_events: int
    unfinished: int
    mean_time_in_server_s: float


@dataclass
class _Fleet:
    settings: FleetSettings
    replicas: list[Replica] = field(default_factory=list)
    gpu_seconds: float = 0.0
    boot_durations: list[float] = field(default_factory=list)
    held: list[Request] = field(default_factory=list)
    first_tokens: deque[tuple[float, float]] = field(default_factory=deque)
    finishes: deque[tuple[float, float]] = field(default_factory=deque)
    arrivals: deque[tuple[float, int]] = field(default_factory=deque)  # scraped counter samples
    scale_events: int = 0
    lifetimes: list[tuple[float, float]] = field(default_factory=list)  # (created, gone) of retired replicas

    def add(self, now: float, warm: bool = False) -> None:
        ready_at = now if warm else now + self.settings.model.load_time_s
        self.replicas.append(Replica(self.settings.model, created_at=now, ready_at=ready_at, clock=now))

    def serving(self, now: float) -> list[Replica]:
        return [r for r in self.replicas if not r.draining and r.ready_at <= now]

    def resize(self, now: float, wanted: int) -> None:
        live = [r for r in self.replicas if not r.draining]
        if wanted != len(live):
            self.scale_events += 1
        for _ in range(wanted - len(live)):
            self.add(now)
        surplus = len(live) - wanted
        booting = sorted((r for r in live if r.ready_at > now), key=lambda r: -r.created_at)
        for replica in booting[: max(0, surplus)]:
            self.replicas.remove(replica)
            self.lifetimes.append((replica.created_at, now))
            surplus -= 1
        ready = sorted((r for r in live if r.ready_at <= now), key=lambda r: r.in_flight())
        for replica in ready[: max(0, surplus)]:
            replica.draining = True

    def route(self, request: Request, now: float) -> None:
        serving = self.serving(now)
        if not serving:
            self.held.append(request)  # held at the Service until a replica is ready (scale from zero)
            return
        target = min(serving, key=lambda r: r.in_flight())
        target.advance(now)
        target.submit(request)

    def advance(self, until: float) -> None:
        for replica in list(self.replicas):
            was_booting = replica.clock < replica.ready_at
            replica.advance(until)
            if was_booting and replica.ready_at <= until:
                self.boot_durations.append(replica.ready_at - replica.created_at)
            for request in replica.first_tokens:
                self.first_tokens.append((request.first_token_at or until, request.ttft()))
            replica.first_tokens.clear()
            for request in replica.finished:
                self.finishes.append((request.finished_at or until, request.tpot()))
            replica.finished.clear()
            if replica.draining and replica.in_flight() == 0:
                self.replicas.remove(replica)
                self.lifetimes.append((replica.created_at, until))
        if self.held and self.serving(until):
            held, self.held = self.held, []
            for request in held:
                self.route(request, until)

    def view(self, now: float, arrived: int) -> FleetView:
        self.arrivals.append((now, arrived))
        while self.arrivals and now - self.arrivals[0][0] > RATE_WINDOW_S:
            self.arrivals.popleft()
        span = now - self.arrivals[0][0]
        rate = (arrived - self.arrivals[0][1]) / span if span > 0 else 0.0
        for samples in (self.first_tokens, self.finishes):
            while samples and now - samples[0][0] > LATENCY_WINDOW_S:
                samples.popleft()
        percentile = self.settings.objectives.percentile
        serving = self.serving(now)
        return FleetView(
            now=now,
            ready=tuple(ReplicaGauges(len(r.waiting), r.running(), r.kv_usage()) for r in serving),
            booting=sum(1 for r in self.replicas if not r.draining and r.ready_at > now),
            arrival_rate=rate,
            ttft_percentile_s=_percentile([v for _, v in self.first_tokens], percentile),
            tpot_percentile_s=_percentile([v for _, v in self.finishes], percentile),
            boot_durations_s=tuple(self.boot_durations),
            held_at_service=len(self.held),
        )


def simulate_fleet(
    trace: Sequence[TraceRequest],
    settings: FleetSettings,
    autoscaler: Autoscaler | None,
    measure_from_s: float = 0.0,
    drain_s: float = 600.0,
) -> FleetOutcome:
    """Replay TRACE on a fleet scaled by AUTOSCALER (None: the initial fleet, fixed).

    Only what happens from MEASURE_FROM_S counts: the requests arriving from then, and GPU time from
    then to the trace's last arrival. Before it, the fleet and its autoscaler warm up on the same
    trace, as a service that was running before the measured window opened.
    """
    fleet = _Fleet(settings)
    for _ in range(settings.initial_replicas):
        fleet.add(0.0, warm=True)
    requests = [Request(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in trace]
    end = requests[-1].arrival + ROUTER_TICK_S if requests else 0.0
    scrape_every = max(1, round(settings.scrape_s / ROUTER_TICK_S))
    decide_every = max(1, round((autoscaler.period_s if autoscaler else 1.0) / ROUTER_TICK_S))
    view: FleetView | None = None
    nxt = tick = 0
    replica_ticks = peak = 0
    while True:
        now = tick * ROUTER_TICK_S
        until = now + ROUTER_TICK_S
        while nxt < len(requests) and requests[nxt].arrival < until:
            fleet.route(requests[nxt], requests[nxt].arrival)
            nxt += 1
        fleet.advance(until)
        tick += 1
        if measure_from_s <= now and until <= end:
            live = len(fleet.replicas)
            replica_ticks += live
            peak = max(peak, live)
        if tick % scrape_every == 0:
            view = fleet.view(until, nxt)
        if autoscaler is not None and view is not None and tick % decide_every == 0 and until <= end:
            fleet.resize(until, max(0, autoscaler.decide(view)))
        if until >= end and (nxt == len(requests) and all(r.in_flight() == 0 for r in fleet.replicas)):
            break
        if until >= end + drain_s:
            break
    lifetimes = fleet.lifetimes + [(r.created_at, end) for r in fleet.replicas]
    fleet.gpu_seconds = sum(max(0.0, min(gone, end) - max(born, measure_from_s)) for born, gone in lifetimes)
    measured = [r for r in requests if r.arrival >= measure_from_s]
    ticks = max(1, math.ceil((end - measure_from_s) / ROUTER_TICK_S))
    return _outcome(measured, fleet, settings, replica_ticks=replica_ticks, ticks=ticks, peak=peak)


def _outcome(
    requests: list[Request], fleet: _Fleet, settings: FleetSettings, *, replica_ticks: int, ticks: int, peak: int
) -> FleetOutcome:
    objectives = settings.objectives
    done = [r for r in requests if r.finished_at is not None]
    met = sum(1 for r in done if r.ttft() <= objectives.ttft_s and r.tpot() <= objectives.tpot_s)
    return FleetOutcome(
        slo_attainment=met / len(requests) if requests else 1.0,
        gpu_hours=fleet.gpu_seconds * settings.model.gpus_per_replica / 3600,
        requests=len(requests),
        ttft_p95_s=_percentile([r.ttft() for r in done], 0.95) or 0.0,
        tpot_p95_s=_percentile([r.tpot() for r in done], 0.95) or 0.0,
        mean_replicas=replica_ticks / ticks,
        max_replicas=peak,
        scale_events=fleet.scale_events,
        unfinished=len(requests) - len(done),
        mean_time_in_server_s=sum((r.finished_at or 0.0) - r.arrival for r in done) / len(done) if done else 0.0,
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
