"""The InferenceService autoscaler's control law: pure, with the clock passed in.

HPA-style proportional control on a service-wide metric. The law follows the
Kubernetes HorizontalPodAutoscaler's algorithm for an external metric with an
``AverageValue`` target, so people who know HPA can predict it:

1. ``raw = ceil(total / targetPerReplica)``, unless ``total / (current * target)``
   is within ``1 ± tolerance``, when the recommendation is ``current``.
   Dividing by the current (not the ready) replica count counts starting
   replicas as capacity already bought, so a slow model load does not make the
   law add replicas twice for the same demand, and keeps the law monotone.
2. The recommendation is clamped to the bounds and recorded with its time.
3. Stabilisation: the result may rise no higher than the *lowest*
   recommendation within the scale-up window and fall no lower than the
   *highest* within the scale-down window.
4. Rate limits: within any period, replicas added (removed) since the period
   began may not exceed what the policies allow; of several policies the one
   allowing the largest change wins, as HPA's default ``selectPolicy: Max``.

A missing or stale metric holds the current count (never flaps to zero);
out-of-bounds counts are brought back into bounds whatever the metric says.
Zero replicas happen only with ``scaleToZero`` and a metric of exactly zero
for the whole scale-down window; from zero, any demand wakes the service.

What must survive between reconciles is :class:`AutoscalerState`, a small
JSON-serialisable value the controller keeps on the object (an annotation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from aisched.api.inference_service import (
    HPA_LAW_MAX_SCALE_DOWN_PER_MINUTE,
    HPA_LAW_MAX_SCALE_UP_PER_MINUTE,
    AutoscalingSpec,
)

RATE_LIMIT_PERIOD_SECONDS = 60
"""The API's rate limits are per minute."""

DEFAULT_METRIC_MAX_AGE_SECONDS = 120.0
"""A sample older than this is stale: four 30 s scrapes missed, or eight 15 s ones."""


class ReasonCode(StrEnum):
    """Why the autoscaler chose what it chose; lands in status and events."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    SCALE_FROM_ZERO = "ScaleFromZero"
    SCALE_TO_ZERO = "ScaleToZero"
    WITHIN_TOLERANCE = "WithinTolerance"
    SCALE_UP_STABILIZED = "ScaleUpStabilized"
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
    SCALE_UP_LIMITED = "ScaleUpLimited"
    SCALE_DOWN_LIMITED = "ScaleDownLimited"
    AT_MAX_REPLICAS = "AtMaxReplicas"
    AT_MIN_REPLICAS = "AtMinReplicas"
    ABOVE_MAX_REPLICAS = "AboveMaxReplicas"
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    METRIC_UNAVAILABLE = "MetricUnavailable"
    IDLE_AT_ZERO = "IdleAtZero"


class PolicyKind(StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


@dataclass(frozen=True)
class RatePolicy:
    """At most ``value`` replicas (or percent of the count at the period's start) per period."""

    kind: PolicyKind
    value: int
    period_seconds: int

    def limit(self, period_start_replicas: int, up: bool) -> int:
        """Replica count this policy allows, counted from the period's start."""
        if self.kind is PolicyKind.PODS:
            change = self.value
        elif up:
            change = math.ceil(period_start_replicas * self.value / 100)
        else:
            change = math.floor(period_start_replicas * self.value / 100)
        return period_start_replicas + change if up else period_start_replicas - change


@dataclass(frozen=True)
class ScalingBehavior:
    """Everything the control law needs to know about one service; pure data."""

    min_replicas: int
    max_replicas: int
    target_per_replica: float
    tolerance: float = 0.1
    scale_to_zero: bool = False
    scale_up_window_seconds: float = 0.0
    scale_down_window_seconds: float = 300.0
    scale_up_policies: tuple[RatePolicy, ...] = ()
    scale_down_policies: tuple[RatePolicy, ...] = ()
    metric_max_age_seconds: float = DEFAULT_METRIC_MAX_AGE_SECONDS

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError("min_replicas 0 needs scale_to_zero")
        if self.target_per_replica <= 0:
            raise ValueError("target_per_replica must be positive")

    @classmethod
    def from_spec(
        cls, spec: AutoscalingSpec, metric_max_age_seconds: float = DEFAULT_METRIC_MAX_AGE_SECONDS
    ) -> ScalingBehavior:
        target = spec.metric.target_per_replica
        if target is None:  # type LLM, which aisched.policy.llm_scaling decides instead
            raise ValueError("this law needs metric.targetPerReplica")
        up, down = spec.max_scale_up_replicas_per_minute, spec.max_scale_down_replicas_per_minute
        up = HPA_LAW_MAX_SCALE_UP_PER_MINUTE if up is None else up
        down = HPA_LAW_MAX_SCALE_DOWN_PER_MINUTE if down is None else down
        return cls(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_per_replica=target,
            tolerance=spec.tolerance,
            scale_to_zero=spec.scale_to_zero,
            scale_up_window_seconds=spec.scale_up_stabilization_seconds,
            scale_down_window_seconds=spec.scale_down_stabilization_seconds,
            scale_up_policies=(RatePolicy(PolicyKind.PODS, up, RATE_LIMIT_PERIOD_SECONDS),),
            scale_down_policies=(RatePolicy(PolicyKind.PODS, down, RATE_LIMIT_PERIOD_SECONDS),),
            metric_max_age_seconds=metric_max_age_seconds,
        )

    @property
    def floor(self) -> int:
        """The fewest replicas while there is demand (zero is reached only through idleness)."""
        return max(self.min_replicas, 1)

    @property
    def history_seconds(self) -> float:
        periods = [p.period_seconds for p in (*self.scale_up_policies, *self.scale_down_policies)]
        return max([self.scale_up_window_seconds, self.scale_down_window_seconds, *periods])


@dataclass(frozen=True)
class MetricSample:
    """The service-wide metric (sum over replicas) and when it was read."""

    value: float
    observed_at: datetime


@dataclass(frozen=True)
class Recommendation:
    at: float
    """Seconds since the epoch (UTC)."""
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    at: float
    """Seconds since the epoch (UTC)."""
    change: int
    """Replicas added (positive) or removed (negative)."""


@dataclass(frozen=True)
class AutoscalerState:
    """What the control law remembers between reconciles.

    Runs of equal recommendations keep only their latest time: the windows
    need, per value, only whether it was seen after the window's start.
    """

    recommendations: tuple[Recommendation, ...] = ()
    scale_events: tuple[ScaleEvent, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "recommendations": [[r.at, r.replicas] for r in self.recommendations],
                "scaleEvents": [[e.at, e.change] for e in self.scale_events],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> AutoscalerState:
        """Parse what :meth:`to_json` wrote; anything unreadable gives a fresh state.

        Losing the history costs at most one stabilisation window of caution,
        which beats refusing to scale because an annotation was hand-edited.
        """
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            return cls(
                recommendations=tuple(Recommendation(float(t), int(n)) for t, n in raw["recommendations"]),
                scale_events=tuple(ScaleEvent(float(t), int(n)) for t, n in raw["scaleEvents"]),
            )
        except (ValueError, TypeError, KeyError):
            return cls()


@dataclass(frozen=True)
class AutoscaleDecision:
    """What to do now, why (CamelCase reason), and the state to store for next time."""

    replicas: int
    reason: ReasonCode
    message: str
    state: AutoscalerState = field(repr=False)
    metric_per_replica: float | None = None


def decide_replicas(
    behavior: ScalingBehavior,
    state: AutoscalerState,
    current_replicas: int,
    sample: MetricSample | None,
    now: datetime,
) -> AutoscaleDecision:
    """The replica count for now.

    ``current_replicas`` is the scale's spec (replicas asked for, ready or not);
    ``sample`` is the service-wide metric or None when the source had none.
    """
    at = _epoch_seconds(now)
    state = _forget_before(state, at - behavior.history_seconds)
    out_of_bounds = _bring_into_bounds(behavior, current_replicas)
    if out_of_bounds is not None:
        replicas, reason, message = out_of_bounds
        return AutoscaleDecision(replicas, reason, message, _with_scale_event(state, at, replicas - current_replicas))
    missing = _missing_reason(behavior, sample, at)
    if missing is not None or sample is None:
        return AutoscaleDecision(
            current_replicas,
            ReasonCode.METRIC_UNAVAILABLE,
            f"{missing}; holding {current_replicas} replicas",
            state,
        )

    total = max(sample.value, 0.0)
    per_replica = total / current_replicas if current_replicas else None
    recommendation, rec_reason, rec_message = _recommend(behavior, current_replicas, total)
    state = _with_recommendation(state, at, recommendation)
    stabilized = _stabilize(behavior, state, current_replicas, at)
    replicas, limit_reason = _rate_limit(behavior, state, current_replicas, stabilized, at)
    if total > 0:
        # A recommendation of zero still in the window must not keep a service asleep while load arrives.
        replicas = max(replicas, behavior.min_replicas)

    if limit_reason is not None:
        reason, message = limit_reason, f"{rec_message}; rate limit allows {replicas} now"
    elif stabilized != recommendation:
        reason = (
            ReasonCode.SCALE_UP_STABILIZED if recommendation > current_replicas else ReasonCode.SCALE_DOWN_STABILIZED
        )
        window = (
            behavior.scale_up_window_seconds
            if recommendation > current_replicas
            else behavior.scale_down_window_seconds
        )
        message = f"{rec_message}; stabilisation window of {window:g} s holds {replicas}"
    else:
        reason, message = rec_reason, rec_message
    return AutoscaleDecision(
        replicas, reason, message, _with_scale_event(state, at, replicas - current_replicas), per_replica
    )


def _epoch_seconds(now: datetime) -> float:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now.timestamp()


def _bring_into_bounds(behavior: ScalingBehavior, current: int) -> tuple[int, ReasonCode, str] | None:
    if current > behavior.max_replicas:
        return (
            behavior.max_replicas,
            ReasonCode.ABOVE_MAX_REPLICAS,
            f"{current} replicas is above maxReplicas {behavior.max_replicas}",
        )
    idle_at_zero = current == 0 and behavior.scale_to_zero
    if current < behavior.min_replicas and not idle_at_zero:
        return (
            behavior.min_replicas,
            ReasonCode.BELOW_MIN_REPLICAS,
            f"{current} replicas is below minReplicas {behavior.min_replicas}",
        )
    return None


def _missing_reason(behavior: ScalingBehavior, sample: MetricSample | None, at: float) -> str | None:
    if sample is None:
        return "the metric source returned no value"
    if not math.isfinite(sample.value):
        return f"the metric value {sample.value} is not a number"
    age = at - _epoch_seconds(sample.observed_at)
    if age > behavior.metric_max_age_seconds:
        return f"the metric is {age:.0f} s old (stale after {behavior.metric_max_age_seconds:g} s)"
    return None


def _recommend(behavior: ScalingBehavior, current: int, total: float) -> tuple[int, ReasonCode, str]:
    """Step 1 and 2: the proportional recommendation, within bounds."""
    target = behavior.target_per_replica
    if total == 0 and behavior.scale_to_zero:
        if current == 0:
            return 0, ReasonCode.IDLE_AT_ZERO, "no demand; staying at zero"
        return 0, ReasonCode.SCALE_TO_ZERO, "no demand; scaling to zero"
    if current == 0:
        wanted = min(max(math.ceil(total / target), behavior.floor), behavior.max_replicas)
        return wanted, ReasonCode.SCALE_FROM_ZERO, f"demand {total:g} at zero replicas; waking {wanted}"
    ratio = total / (current * target)
    described = f"metric {total / current:.4g} per replica against target {target:g} (ratio {ratio:.3f})"
    if abs(ratio - 1) <= behavior.tolerance:
        return current, ReasonCode.WITHIN_TOLERANCE, f"{described}, within tolerance {behavior.tolerance:g}"
    raw = math.ceil(total / target)
    wanted = min(max(raw, behavior.floor), behavior.max_replicas)
    if wanted == current:
        bound = ReasonCode.AT_MAX_REPLICAS if raw > current else ReasonCode.AT_MIN_REPLICAS
        return current, bound, f"{described}; wants {raw}, bounded to {wanted}"
    reason = ReasonCode.SCALE_UP if wanted > current else ReasonCode.SCALE_DOWN
    return wanted, reason, f"{described}; {current} -> {wanted}"


def _stabilize(behavior: ScalingBehavior, state: AutoscalerState, current: int, at: float) -> int:
    """Step 3: rise to the window's lowest recommendation, fall to its highest (HPA)."""
    up_floor = min(_recent(state.recommendations, at - behavior.scale_up_window_seconds))
    down_ceiling = max(_recent(state.recommendations, at - behavior.scale_down_window_seconds))
    return min(max(current, up_floor), down_ceiling)


def _recent(recommendations: Iterable[Recommendation], cutoff: float) -> list[int]:
    # The newest recommendation is stamped `at`, so it is always inside even a zero window.
    return [r.replicas for r in recommendations if r.at >= cutoff]


def _rate_limit(
    behavior: ScalingBehavior, state: AutoscalerState, current: int, wanted: int, at: float
) -> tuple[int, ReasonCode | None]:
    """Step 4: cap the change by what the policies allow over their periods.

    The way to zero passes through no count below minReplicas: such a count is out of
    bounds, and the next pass without a metric (a series commonly vanishes when traffic
    stops) would raise it back to minReplicas, a flap. So the policies govern the descent
    to the floor, and the last step, floor to zero, is taken at once, as KEDA deactivates.
    """
    if wanted == 0 and 0 < current <= behavior.floor:
        return 0, None
    if wanted > current and behavior.scale_up_policies:
        limit = max(
            policy.limit(_period_start(state, current, policy, at), up=True) for policy in behavior.scale_up_policies
        )
        limit = max(limit, current)
        if wanted > limit:
            return limit, ReasonCode.SCALE_UP_LIMITED
    if wanted < current and behavior.scale_down_policies:
        limit = min(
            policy.limit(_period_start(state, current, policy, at), up=False) for policy in behavior.scale_down_policies
        )
        limit = min(limit, current)
        if wanted < limit:
            return (max(limit, behavior.floor) if wanted == 0 else limit), ReasonCode.SCALE_DOWN_LIMITED
    return wanted, None


def _period_start(state: AutoscalerState, current: int, policy: RatePolicy, at: float) -> int:
    changed = sum(e.change for e in state.scale_events if e.at > at - policy.period_seconds)
    return current - changed


def _forget_before(state: AutoscalerState, cutoff: float) -> AutoscalerState:
    return AutoscalerState(
        recommendations=tuple(r for r in state.recommendations if r.at >= cutoff),
        scale_events=tuple(e for e in state.scale_events if e.at >= cutoff),
    )


def _with_recommendation(state: AutoscalerState, at: float, replicas: int) -> AutoscalerState:
    kept = state.recommendations
    if kept and kept[-1].replicas == replicas:
        kept = kept[:-1]
    return replace(state, recommendations=(*kept, Recommendation(at, replicas)))


def _with_scale_event(state: AutoscalerState, at: float, change: int) -> AutoscalerState:
    if change == 0:
        return state
    return replace(state, scale_events=(*state.scale_events, ScaleEvent(at, change)))
