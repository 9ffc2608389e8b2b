"""The deadline-aware capacity decision: what each policy does, and that Prefer never misses a
deadline that on-demand could meet, whatever spot does."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.common import CapacityType, SpotPolicy
from aisched.policy.spot import CapacityChoice, CapacityDecision, SpotJob, capacity_types_of, choose_capacity

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HOUR = 3600.0


def decide(
    policy: SpotPolicy = SpotPolicy.PREFER,
    *,
    hours_left: float | None = 10.0,
    work_h: float = 4.0,
    spot: bool = True,
    unsaved_h: float = 0.0,
    running_on: CapacityType | None = None,
    previous: CapacityDecision | None = None,
) -> CapacityDecision:
    job = SpotJob(
        remaining_work_s=work_h * HOUR, restart_overhead_s=600.0, unsaved_work_s=unsaved_h * HOUR, running_on=running_on
    )
    return choose_capacity(
        policy,
        job,
        now=T0,
        deadline=None if hours_left is None else T0 + timedelta(hours=hours_left),
        spot_available=spot,
        decision_period_s=60.0,
        previous=previous,
    )


def test_never_is_always_on_demand() -> None:
    assert decide(SpotPolicy.NEVER, spot=True).choice == CapacityChoice.ON_DEMAND


def test_only_is_spot_or_waiting_even_when_the_deadline_is_lost() -> None:
    assert decide(SpotPolicy.ONLY, hours_left=1.0, spot=True).choice == CapacityChoice.SPOT
    assert decide(SpotPolicy.ONLY, hours_left=1.0, spot=False).choice == CapacityChoice.WAIT


def test_prefer_without_a_deadline_takes_spot_or_falls_back_to_on_demand() -> None:
    assert decide(hours_left=None, spot=True).choice == CapacityChoice.SPOT
    outage = decide(hours_left=None, spot=False)
    # No deadline says how long the job may wait: it never waits for its price.
    assert outage.choice == CapacityChoice.ON_DEMAND
    assert outage.reason == "SpotOutageOnDemand"
    assert not outage.pinned_on_demand, "spot again for its next start"
    assert "deadline" in outage.message


def test_prefer_with_slack_takes_spot() -> None:
    decision = decide(hours_left=10.0, spot=True)
    assert decision.choice == CapacityChoice.SPOT
    assert decision.reason == "SpotAvailable"
    assert not decision.pinned_on_demand


def test_prefer_waits_out_an_outage_while_slack_is_ample() -> None:
    assert decide(hours_left=10.0, work_h=4.0, spot=False).choice == CapacityChoice.WAIT


def test_prefer_rides_an_outage_on_on_demand_when_slack_runs_low_and_returns_to_spot() -> None:
    # 4 h of work, 4.5 h left: 0.5 h of slack is less than the fifth of the work kept in reserve.
    outage = decide(hours_left=4.5, work_h=4.0, spot=False)
    assert (outage.choice, outage.reason, outage.pinned_on_demand) == (
        CapacityChoice.ON_DEMAND,
        "SpotOutageOnDemand",
        False,
    )
    back = decide(hours_left=4.4, work_h=3.9, spot=True, running_on=CapacityType.ON_DEMAND, previous=outage)
    assert back.choice == CapacityChoice.SPOT


def test_an_outage_ridden_on_on_demand_is_ridden_to_its_end() -> None:
    ongoing = decide(hours_left=10.0, work_h=4.0, spot=False, running_on=CapacityType.ON_DEMAND)
    assert ongoing.choice == CapacityChoice.ON_DEMAND


def test_unsaved_work_counts_against_the_slack() -> None:
    assert decide(hours_left=4.4, work_h=4.0, spot=True).choice == CapacityChoice.SPOT
    at_risk = decide(hours_left=4.4, work_h=4.0, spot=True, unsaved_h=0.5)
    assert (at_risk.choice, at_risk.reason) == (CapacityChoice.ON_DEMAND, "DeadlineNeedsOnDemand")


def test_once_the_deadline_forces_on_demand_it_stays_there() -> None:
    forced = decide(hours_left=4.1, work_h=4.0, spot=True)
    assert forced.pinned_on_demand
    later = decide(hours_left=100.0, work_h=1.0, spot=True, running_on=CapacityType.ON_DEMAND, previous=forced)
    assert later.choice == CapacityChoice.ON_DEMAND
    assert later.pinned_on_demand


def test_a_missed_deadline_still_runs_on_demand() -> None:
    assert decide(hours_left=-1.0, spot=True).choice == CapacityChoice.ON_DEMAND


# --- the guarantee, checked on a small simulator of its own ------------------------------------


@dataclass
class Job:
    """One job on one instance, stepped one decision period at a time."""

    work: float
    checkpoint_interval: float
    checkpoint_cost: float
    restart: float
    saved: float = 0.0
    unsaved: float = 0.0
    on: CapacityType | None = None
    overhead_left: float = 0.0
    checkpoint_left: float = 0.0
    decisions: list[CapacityDecision] = field(default_factory=list)

    @property
    def left(self) -> float:
        return self.work - self.saved - self.unsaved

    def preempt(self) -> None:
        self.unsaved = self.overhead_left = self.checkpoint_left = 0.0
        self.on = None

    def move(self, to: CapacityType | None) -> None:
        self.saved += self.unsaved  # a move the operator chooses is graceful
        self.unsaved = self.checkpoint_left = 0.0
        self.on, self.overhead_left = to, (self.restart if to is not None else 0.0)

    def run(self, seconds: float) -> float | None:
        """Run for up to `seconds`; the time into them at which the work got done, if it did."""
        used = 0.0
        while self.on is not None and used < seconds and self.left > 1e-9:
            if self.overhead_left > 0:
                step = min(self.overhead_left, seconds - used)
                self.overhead_left -= step
            elif self.checkpoint_left > 0:
                step = min(self.checkpoint_left, seconds - used)
                self.checkpoint_left -= step
                if self.checkpoint_left <= 0:
                    self.saved, self.unsaved = self.saved + self.unsaved, 0.0
            else:
                until_checkpoint = self.checkpoint_interval - self.unsaved if self.on == CapacityType.SPOT else math.inf
                step = min(seconds - used, self.left, until_checkpoint)
                self.unsaved += step
                if self.on == CapacityType.SPOT and self.unsaved >= self.checkpoint_interval and self.left > 1e-9:
                    self.checkpoint_left = self.checkpoint_cost
            used += step
        return used if self.left <= 1e-9 else None


_ON = {CapacityChoice.SPOT: CapacityType.SPOT, CapacityChoice.ON_DEMAND: CapacityType.ON_DEMAND}


def finish_time(job: Job, availability: list[bool], deadline: float, period: float, reserve: float) -> float:
    elapsed, tick, previous = 0.0, 0, None
    while True:
        spot = availability[tick] if tick < len(availability) else False
        if job.on == CapacityType.SPOT and not spot:
            job.preempt()
        previous = choose_capacity(
            SpotPolicy.PREFER,
            SpotJob(
                remaining_work_s=job.left,
                restart_overhead_s=job.restart,
                unsaved_work_s=job.unsaved if job.on == CapacityType.SPOT else 0.0,
                running_on=job.on,
            ),
            now=T0 + timedelta(seconds=elapsed),
            deadline=T0 + timedelta(seconds=deadline),
            spot_available=spot,
            decision_period_s=period,
            previous=previous,
            reserve_per_work=reserve,
        )
        job.decisions.append(previous)
        target = _ON.get(previous.choice)
        assert not (target == CapacityType.SPOT and not spot), "chose spot where there is none"
        if target != job.on:
            job.move(target)
        done_after = job.run(period)
        if done_after is not None:
            return elapsed + done_after
        elapsed += period
        tick += 1


@settings(max_examples=300, deadline=None)
@given(
    availability=st.lists(st.booleans(), max_size=400),
    period=st.floats(min_value=10.0, max_value=600.0),
    job=st.builds(
        Job,
        work=st.floats(min_value=60.0, max_value=20 * HOUR),
        checkpoint_interval=st.floats(min_value=60.0, max_value=4 * HOUR),
        checkpoint_cost=st.floats(min_value=1.0, max_value=600.0),
        restart=st.floats(min_value=0.0, max_value=1800.0),
    ),
    extra_slack=st.floats(min_value=0.0, max_value=2.0),
    reserve=st.floats(min_value=0.0, max_value=1.0),
)
def test_prefer_never_misses_a_deadline_that_on_demand_could_meet(
    availability: list[bool], period: float, job: Job, extra_slack: float, reserve: float
) -> None:
    # Feasible at submission: starting on on-demand right away, it would finish in time.
    deadline = job.restart + job.work * (1 + extra_slack)
    finished = finish_time(job, availability, deadline, period, reserve)
    assert finished <= deadline + 1e-6 * deadline
    pinned_at = next((i for i, d in enumerate(job.decisions) if d.pinned_on_demand), len(job.decisions))
    assert all(d.choice == CapacityChoice.ON_DEMAND for d in job.decisions[pinned_at:]), "flapped after the pin"


def test_a_gang_enters_the_cycle_on_spot_alone_unless_on_demand_was_chosen() -> None:
    # Waiting for spot enters on spot too: its priority may make room there no free GPU offers.
    for choice, types in (
        (CapacityChoice.SPOT, (CapacityType.SPOT,)),
        (CapacityChoice.WAIT, (CapacityType.SPOT,)),
        (CapacityChoice.ON_DEMAND, (CapacityType.ON_DEMAND,)),
    ):
        assert capacity_types_of(CapacityDecision(choice, "Reason", "message")) == types, choice
