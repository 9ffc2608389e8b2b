"""What an LLM service's servers feel, read from Prometheus: queue, batch, KV cache, TTFT and TPOT.

The series come from the engine preset (`aisched.policy.llm_scaling.engines`), renamed where the
service says so. Every query is written here and selects the service's own pods in its own
namespace through `pods_selector`, which quotes every label value (and the series name) as a PromQL
string: a tenant's name cannot widen a selector. Each query is asked on the namespace's circuit,
like the built-in metrics'.

The arrival rate is the rate of the TTFT histogram's observations (one per request that got its
first token), or of the TPOT one where an engine exports no TTFT histogram (TGI): the presets
name no request counter, and a histogram's `_count` is one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from aisched.api.inference_service import LlmMetricSpec
from aisched.policy.llm_scaling import EnginePreset, engine_preset
from aisched.sources.prometheus import MetricNames, PrometheusSource, pods_selector

_DEFAULT_NAMES = MetricNames()


@dataclass(frozen=True)
class LlmQueries:
    """The PromQL for each signal; None where the engine exports no series for it."""

    waiting: str
    running: str
    kv_usage: str | None
    arrival_rate: str | None
    ttft: str | None
    tpot: str | None


@dataclass(frozen=True)
class LlmSample:
    """Service-wide sums and percentiles, None where a series had no value; when the oldest was evaluated."""

    waiting: float | None
    running: float | None
    kv_usage_sum: float | None
    arrival_rate: float | None
    ttft_s: float | None
    tpot_s: float | None
    observed_at: datetime


def preset_of(spec: LlmMetricSpec) -> EnginePreset:
    """The engine's preset with the service's renamed series (validated by the API, again by the preset)."""
    overrides = spec.series.model_dump(exclude_none=True) if spec.series is not None else None
    return engine_preset(str(spec.engine), overrides)


def llm_queries(
    spec: LlmMetricSpec, namespace: str, pods: list[str] | tuple[str, ...], names: MetricNames = _DEFAULT_NAMES
) -> LlmQueries:
    preset = preset_of(spec)

    def selector(series: str) -> str:
        return pods_selector(series, names.namespace_label, names.pod_label, namespace, pods)

    def quantile(histogram: str | None) -> str | None:
        if histogram is None:
            return None
        buckets = f"rate({selector(histogram + '_bucket')}[{names.rate_window}])"
        return f"histogram_quantile({spec.objectives.percentile:g}, sum by (le) ({buckets}))"

    counted = preset.ttft_histogram or preset.tpot_histogram
    return LlmQueries(
        waiting=f"sum({selector(preset.waiting)})",
        running=f"sum({selector(preset.running)})",
        kv_usage=f"sum({selector(preset.kv_usage)})" if preset.kv_usage else None,
        arrival_rate=f"sum(rate({selector(counted + '_count')}[{names.rate_window}]))" if counted else None,
        ttft=quantile(preset.ttft_histogram),
        tpot=quantile(preset.tpot_histogram),
    )


async def read_llm_signals(
    source: PrometheusSource, spec: LlmMetricSpec, namespace: str, pods: list[str]
) -> LlmSample | None:
    """One reading of every signal, asked together; None when the service has no pods to ask about.

    A PrometheusError of any query is raised: a reading with some signals missing would look like
    a quiet service and shrink it.
    """
    if not pods:
        return None
    queries = llm_queries(spec, namespace, pods, source.names)

    async def ask(promql: str | None) -> tuple[float | None, datetime | None]:
        if promql is None:
            return None, None
        sample = await source.query(promql, tenant=namespace)
        return (None, None) if sample is None else (sample.value, sample.observed_at)

    answers = await asyncio.gather(
        *(
            ask(q)
            for q in (
                queries.waiting,
                queries.running,
                queries.kv_usage,
                queries.arrival_rate,
                queries.ttft,
                queries.tpot,
            )
        )
    )
    times = [at for _, at in answers if at is not None]
    if not times:
        return None
    (waiting, _), (running, _), (kv, _), (rate, _), (ttft, _), (tpot, _) = answers
    return LlmSample(waiting, running, kv, rate, ttft, tpot, observed_at=min(times))
