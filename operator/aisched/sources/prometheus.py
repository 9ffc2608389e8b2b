"""The autoscaler's metric, read from Prometheus over its HTTP API (instant queries).

Every query returns the *service-wide* value, which the control law divides by
the replica count (see :mod:`aisched.policy.autoscale`). Built-in queries select
the service's pods by namespace and exact pod names, so they need no extra
relabelling: Prometheus's Kubernetes service discovery and the DCGM exporter's
pod attribution both label series with the pod's namespace and name.

``None`` means the answer was empty (no series: no pods yet, nothing scraped,
or every series went stale) or not a number; :class:`PrometheusError` means no
answer could be had (unreachable, timed out, rejected query, unreadable reply).
The controller treats both as a missing metric and holds the replica count.

Each query is bounded as a whole by `timeout_seconds`, its retries included (a server that
drips its answer passes every per-read timeout, never this one). 429 and 5xx are retried
after a jittered backoff; outages (those, timeouts, no connection) count towards a circuit
(`aisched.policy.circuit`) which, open, answers at once without asking, so a Prometheus that
is down costs each later pass nothing.

Tenants are kept apart. A PromQL metric is confined to its service's namespace
(`aisched.policy.promql_scope`) before it is sent; queries the operator writes itself
(built-in metrics, energy, carbon) are sent as written. Each tenant (namespace) has its
own circuit and at most `PER_TENANT_IN_FLIGHT` queries in flight, and all of them together
at most `MAX_IN_FLIGHT`, so one namespace's slow or failing queries open only its own
circuit and never take the others' turns (waiting for a place among all of them counts
against no circuit). A namespace's query over its cap waits for one of its own to end, holding
no place among all of them meanwhile; one still waiting when its time is up is not sent this
turn (logged; it counts against no circuit either). Answers are read as a stream and refused past
`MAX_ANSWER_BYTES`. Error messages, which reach the tenant's conditions and events, name
the HTTP status and a class of error, never Prometheus's text (which can quote other
series' label sets); that text is logged for the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import httpx

from aisched.api.inference_service import MetricSpec, MetricType
from aisched.policy.autoscale import MetricSample
from aisched.policy.circuit import Breaker, Circuit, after_failure, allows
from aisched.policy.promql_scope import QueryRefusedError, TenantScope, scope_query

log = logging.getLogger(__name__)
_BODY_EXCERPT = 200
"""Of a reply body, in the operator's log only."""
MAX_ANSWER_BYTES = 1 << 20
"""An instant query for one value answers in bytes; a megabyte is someone selecting everything."""
MAX_IN_FLIGHT = 32
PER_TENANT_IN_FLIGHT = 4
"""Queries of one namespace at once: each is bounded in cost (`promql_scope`), their number here."""
OPERATOR = ""
"""The tenant key of the operator's own queries (energy, carbon)."""
_ERROR_TYPES = frozenset({"bad_data", "execution", "timeout", "canceled", "internal", "unavailable", "not_found"})


@dataclass
class _TenantTurns:
    """One tenant's places for queries in flight, and how many of its queries hold or wait for one."""

    places: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(PER_TENANT_IN_FLIGHT))
    users: int = 0
    running: int = 0


class PrometheusError(Exception):
    """Prometheus gave no usable answer; the message says why, for a person."""


class PrometheusUnavailableError(PrometheusError):
    """Prometheus could not be asked (timeout, no connection, 429, 5xx): an outage, not a bad query."""


class MetricQueryRefusedError(PrometheusError):
    """The service's PromQL cannot be confined to its namespace; it is not sent."""


@dataclass(frozen=True)
class MetricNames:
    """Series and labels the built-in queries read; model servers name their metrics differently."""

    request_counter: str = "http_requests_total"
    """Counter of requests served, per pod (vLLM: ``vllm:request_success_total``)."""
    concurrency_gauge: str = "http_requests_in_flight"
    """Requests being served now, per pod (vLLM: ``vllm:num_requests_running``)."""
    gpu_utilization: str = "DCGM_FI_DEV_GPU_UTIL"
    """DCGM exporter's GPU utilisation in percent, per GPU."""
    rate_window: str = "1m"
    """Range of ``rate()``: at least four scrape intervals, short enough to follow a burst."""
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    gpu_namespace_label: str = "namespace"
    """Where a ServiceMonitor scrapes the DCGM exporter without ``honorLabels``, ``exported_namespace``."""
    gpu_pod_label: str = "pod"
    """Likewise ``exported_pod``."""


def builtin_query(metric: MetricSpec, namespace: str, pods: Sequence[str], names: MetricNames = MetricNames()) -> str:
    """The PromQL for a metric spec, summed over the named pods of the service."""
    if metric.type == MetricType.LLM:
        raise ValueError("metric type LLM reads several series: aisched.sources.llm_signals")
    if metric.type == MetricType.PROMQL:
        if not metric.query:
            raise ValueError("metric type PromQL needs metric.query")
        return metric.query
    if metric.type == MetricType.GPU_UTILIZATION:
        # Average each pod's GPUs first, so the sum is "percent per replica" times replicas.
        selector = pods_selector(names.gpu_utilization, names.gpu_namespace_label, names.gpu_pod_label, namespace, pods)
        return f"sum(avg by ({names.gpu_pod_label}) ({selector}))"
    if metric.type == MetricType.CONCURRENCY:
        return f"sum({pods_selector(names.concurrency_gauge, names.namespace_label, names.pod_label, namespace, pods)})"
    selector = pods_selector(names.request_counter, names.namespace_label, names.pod_label, namespace, pods)
    return f"sum(rate({selector}[{names.rate_window}]))"


def pods_selector(series: str, namespace_label: str, pod_label: str, namespace: str, pods: Sequence[str]) -> str:
    """One series of the named pods of a namespace, every part quoted as a PromQL string."""
    pod_regex = "|".join(re.escape(pod) for pod in sorted(pods))
    matchers = [f"{namespace_label}={_string(namespace)}", f"{pod_label}=~{_string(pod_regex)}"]
    # One matcher form for every part, whatever characters the configured series name holds.
    return "{" + ",".join([f"__name__={_string(series)}", *matchers]) + "}"


def _string(value: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class Retry:
    """How a query retries an outage, and the circuit it feeds; tests pass their clock and sleep."""

    retries: int = 1
    backoff_seconds: float = 0.2
    breaker: Breaker = field(default_factory=Breaker)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), compare=False)
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    jitter: Callable[[], float] = field(default=random.random, compare=False)


class PrometheusSource:
    """Instant queries against one Prometheus (or anything serving its HTTP API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 5.0,
        headers: Mapping[str, str] | None = None,
        names: MetricNames = MetricNames(),
        client: httpx.AsyncClient | None = None,
        retry: Retry | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.names = names
        self.retry = retry or Retry()
        self._circuits: dict[str, Circuit] = {}
        self._turns: dict[str, _TenantTurns] = {}
        """Namespaces with queries in flight or waiting; one with none is no entry."""
        self.max_in_flight = max_in_flight
        self._gate = asyncio.Semaphore(max_in_flight)
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_seconds, headers=dict(headers or {}))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def service_metric(self, metric: MetricSpec, namespace: str, pods: Sequence[str]) -> MetricSample | None:
        """The service-wide value of an InferenceService's metric; None when there is none."""
        if not pods and metric.type != MetricType.PROMQL:
            return None
        promql = builtin_query(metric, namespace, pods, self.names)
        if metric.type == MetricType.PROMQL:
            try:
                promql = scope_query(promql, TenantScope(namespace, self.names.namespace_label))
            except QueryRefusedError as refused:
                raise MetricQueryRefusedError(str(refused)) from None
        return await self.query(promql, tenant=namespace)

    async def query(self, promql: str, at: datetime | None = None, *, tenant: str = OPERATOR) -> MetricSample | None:
        """One instant query, on `tenant`'s circuit; the sample carries the evaluation time Prometheus reports."""
        circuit = self._circuits.get(tenant, Circuit())
        if not allows(circuit, self.retry.clock()):
            whose = f" of namespace {tenant}'s queries" if tenant else ""
            raise PrometheusUnavailableError(
                f"Prometheus at {self.url} is not asked until {circuit.reopens_at()} after "
                f"{circuit.failures} failures in a row{whose}"
            )
        clock = asyncio.get_running_loop().time
        async with self._tenant_turn(tenant, clock() + self.timeout_seconds):
            # Its own time starts with its turn: waiting behind its namespace's others is no outage.
            sample = await self._query_gated(promql, at, tenant, clock() + self.timeout_seconds)
        self._circuits.pop(tenant, None)  # closed: a closed circuit is no entry
        return sample

    def in_flight(self, tenant: str = OPERATOR) -> int:
        """Queries of one tenant being asked now (not those waiting for their turn)."""
        turns = self._turns.get(tenant)
        return turns.running if turns is not None else 0

    @contextlib.asynccontextmanager
    async def _tenant_turn(self, tenant: str, deadline: float) -> AsyncIterator[None]:
        """One of the tenant's PER_TENANT_IN_FLIGHT places, waited for until DEADLINE at most."""
        turns = self._turns.setdefault(tenant, _TenantTurns())
        turns.users += 1
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await turns.places.acquire()
            except TimeoutError:
                whose = f"namespace {tenant}" if tenant else "the operator"
                log.info(
                    "not sending a query of %s this turn: %d of its queries were still running after %g s",
                    whose,
                    PER_TENANT_IN_FLIGHT,
                    self.timeout_seconds,
                )
                raise PrometheusUnavailableError(
                    f"{PER_TENANT_IN_FLIGHT} queries of this namespace were still running after "
                    f"{self.timeout_seconds:g} s; this one is not sent this turn"
                ) from None
            turns.running += 1
            try:
                yield
            finally:
                turns.running -= 1
                turns.places.release()
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[tenant]

    def circuit(self, tenant: str = OPERATOR) -> Circuit:
        """The circuit of one tenant's queries."""
        return self._circuits.get(tenant, Circuit())

    def _failed(self, tenant: str) -> None:
        self._circuits[tenant] = after_failure(self.circuit(tenant), self.retry.breaker, self.retry.clock())

    async def _query_gated(self, promql: str, at: datetime | None, tenant: str, deadline: float) -> MetricSample | None:
        """The query once a place among all tenants' is free; waiting for one counts against no circuit."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._gate.acquire()
        except TimeoutError:
            raise PrometheusUnavailableError(
                f"{self.max_in_flight} queries of other namespaces kept Prometheus busy for {self.timeout_seconds:g} s"
            ) from None
        try:
            async with asyncio.timeout_at(deadline):
                return await self._query_retrying(promql, at)
        except TimeoutError:
            self._failed(tenant)
            raise PrometheusUnavailableError(
                f"Prometheus at {self.url} did not answer within {self.timeout_seconds:g} s"
            ) from None
        except PrometheusUnavailableError:
            self._failed(tenant)
            raise
        finally:
            self._gate.release()

    async def _query_retrying(self, promql: str, at: datetime | None) -> MetricSample | None:
        for attempt in range(self.retry.retries + 1):
            try:
                return await self._query_once(promql, at)
            except PrometheusUnavailableError:
                if attempt == self.retry.retries:
                    raise
            await self.retry.sleep(self.retry.backoff_seconds * 2**attempt * (0.5 + 0.5 * self.retry.jitter()))
        raise AssertionError("unreachable")

    async def _query_once(self, promql: str, at: datetime | None) -> MetricSample | None:
        form = {"query": promql, "timeout": f"{self.timeout_seconds:g}s"}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        endpoint = f"{self.url}/api/v1/query"
        try:
            # POST: queries naming many pods outgrow what proxies accept in a URL.
            async with self._client.stream("POST", endpoint, data=form, timeout=self.timeout_seconds) as response:
                body = await _read_capped(response, self.url)
        except httpx.TimeoutException as exc:
            raise PrometheusUnavailableError(
                f"Prometheus at {self.url} did not answer within {self.timeout_seconds:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            log.warning("cannot reach Prometheus at %s: %s", self.url, exc)
            raise PrometheusUnavailableError(f"cannot reach Prometheus at {self.url} ({type(exc).__name__})") from exc
        if response.status_code == 429 or response.status_code >= 500:
            try:
                return _parse(response.status_code, body, self.url)
            except PrometheusError as error:
                raise PrometheusUnavailableError(str(error)) from None
        return _parse(response.status_code, body, self.url)


async def _read_capped(response: httpx.Response, url: str) -> bytes:
    """The body, read as it comes; past MAX_ANSWER_BYTES (decoded) the rest is never read."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise PrometheusError(f"Prometheus at {url} answered more than {MAX_ANSWER_BYTES} bytes: answer too large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise PrometheusError(f"Prometheus at {url} answered more than {MAX_ANSWER_BYTES} bytes: answer too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(status: int, raw: bytes, url: str) -> MetricSample | None:
    try:
        body = json.loads(raw)
    except ValueError:
        log.warning("Prometheus at %s answered HTTP %d, not JSON: %r", url, status, raw[:_BODY_EXCERPT])
        raise PrometheusError(f"Prometheus at {url} answered HTTP {status} with a body that is not JSON") from None
    if not isinstance(body, dict):
        raise PrometheusError(f"Prometheus at {url} answered HTTP {status} with unexpected JSON")
    if body.get("status") != "success":
        # The error text can quote series and label sets of any namespace: the operator's log only.
        log.warning("Prometheus at %s rejected a query (HTTP %d): %.1000s", url, status, body.get("error"))
        kind = body.get("errorType")
        named = f"{kind}, " if isinstance(kind, str) and kind in _ERROR_TYPES else ""
        raise PrometheusError(
            f"Prometheus rejected the query ({named}HTTP {status}); the reason is in the operator log"
        )
    if status >= 400:
        raise PrometheusError(f"Prometheus at {url} answered HTTP {status}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"Prometheus at {url} answered without a data object")
    return _sample(data.get("resultType"), data.get("result"))


def _sample(result_type: Any, result: Any) -> MetricSample | None:
    if result_type == "scalar":
        return _point(result)
    if result_type != "vector":
        kind = result_type if result_type in ("matrix", "string") else "result of an unknown type"
        raise PrometheusError(f"the query returned a {kind}; it must return an instant vector or a scalar")
    if not isinstance(result, list):
        raise PrometheusError("the query's vector result is not a list")
    if not result:
        return None
    if len(result) > 1:
        raise PrometheusError(f"the query returned {len(result)} series; wrap it in sum() to get one value")
    (series,) = result
    if not isinstance(series, dict):
        raise PrometheusError("the query's vector result holds something that is not a series")
    return _point(series.get("value"))


def _point(point: Any) -> MetricSample | None:
    """A ``[unix_seconds, "value"]`` pair; NaN and infinities count as no value."""
    try:
        timestamp, text = point
        value = float(text)
        observed_at = datetime.fromtimestamp(float(timestamp), UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        raise PrometheusError("the query returned a sample that is not [time, value]") from None
    if not math.isfinite(value):
        return None
    return MetricSample(value, observed_at)
