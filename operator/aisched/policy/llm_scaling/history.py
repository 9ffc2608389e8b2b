"""What a service learns from its own past: how long its replicas take to boot, and its load a day and a week ago."""

from __future__ import annotations

import math
from dataclasses import dataclass

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


@dataclass(frozen=True)
class ColdStartEstimate:
    """Boot durations (pod created to ready) of the service's own replicas, newest last, at most `keep`."""

    durations_s: tuple[float, ...] = ()
    prior_s: float = 120.0
    keep: int = 20

    def observe(self, duration_s: float) -> ColdStartEstimate:
        """This estimate with one more boot; a negative or non-finite duration (a clock skew) is dropped."""
        if not math.isfinite(duration_s) or duration_s < 0:
            return self
        kept = (*self.durations_s, duration_s)[-self.keep :]
        return ColdStartEstimate(kept, self.prior_s, self.keep)

    def seconds(self) -> float:
        """The 90th percentile of the boots seen, or the prior before any: scaling must lead load by this much.

        A high quantile rather than the mean because a replica that is late costs requests, one that
        is early costs a few GPU-seconds.
        """
        if not self.durations_s:
            return self.prior_s
        ordered = sorted(self.durations_s)
        return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


@dataclass(frozen=True)
class LoadHistory:
    """The service's arrival rate, one sample per `step_s`, newest last; about eight days kept.

    The forecast reads only this: the service's own past, never the future of a trace.
    """

    samples: tuple[tuple[float, float], ...] = ()  # (time, requests per second)
    step_s: float = 60.0
    keep_s: float = 8 * DAY_S

    def record(self, now: float, rate: float) -> LoadHistory:
        if self.samples and now - self.samples[-1][0] < self.step_s:
            return self
        kept = tuple(s for s in self.samples if now - s[0] <= self.keep_s)
        return LoadHistory((*kept, (now, max(0.0, rate))), self.step_s, self.keep_s)

    def rate_at(self, when: float) -> float | None:
        """The sample nearest WHEN if one lies within two steps of it."""
        best: tuple[float, float] | None = None
        for sample in self.samples:
            if abs(sample[0] - when) <= 2 * self.step_s and (
                best is None or abs(sample[0] - when) < abs(best[0] - when)
            ):
                best = sample
        return None if best is None else best[1]

    def forecast(self, now: float, current_rate: float, horizon_s: float) -> float:
        """The rate expected at NOW + HORIZON_S.

        Seasonal where the history reaches back: the change from now to the horizon seen a day and a
        week ago (weights 2:1, the nearer season counting more), applied to the current rate. Without
        a season, the trend of the last ten minutes, extrapolated over the horizon and damped by half
        (a trend dies out more often than it persists). Never below zero.
        """
        ratios: list[tuple[float, float]] = []
        for period, weight in ((DAY_S, 2.0), (WEEK_S, 1.0)):
            then, later = self.rate_at(now - period), self.rate_at(now - period + horizon_s)
            if then is not None and later is not None and then > 0:
                ratios.append((weight, later / then))
        if ratios:
            ratio = sum(w * r for w, r in ratios) / sum(w for w, _ in ratios)
            return max(0.0, current_rate * ratio)
        recent = [s for s in self.samples if now - s[0] <= 600.0]
        if len(recent) < 2:
            return current_rate
        (t0, r0), (t1, r1) = recent[0], recent[-1]
        slope = (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0
        return max(0.0, current_rate + 0.5 * slope * horizon_s)
