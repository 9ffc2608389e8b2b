"""Metric type LLM end to end below the loop: the servers' series over HTTP -> a replica count, scaled.

Prometheus is an httpx MockTransport answering in-process from a table of series names, so the
queries the autoscaler sends are the ones checked; the kube double fails on any call not set up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast
from urllib.parse import parse_qs

import httpx
import pytest

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.controller.serving.autoscaling import ServiceAutoscaler
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import LLM_LOAD_HISTORY, LLM_SCALING_MEMORY, ServingPod
from aisched.policy.llm_scaling.persisted import LOAD_BUCKET_S
from aisched.settings import Settings
from aisched.sources.prometheus import PrometheusSource, Retry
from tests.unit.controller.test_serving_loop import T0, KubeDouble, a_service

pytestmark = pytest.mark.asyncio
NOW = T0 + timedelta(hours=1)


class Servers:
    """Answers each query with the value of the first series name it mentions; records the queries."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values
        self.at = NOW
        """The evaluation time the answers carry."""
        self.queries: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode())["query"][0]
        self.queries.append(query)
        found = [value for series, value in self.values.items() if f'"{series}"' in query]
        result = [{"metric": {}, "value": [self.at.timestamp(), str(found[0])]}] if found else []
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})


def llm_service(replicas: int, **llm: Any) -> InferenceService:
    obj = a_service("chat", replicas, autoscaled=True)
    obj["spec"]["autoscaling"].update(minReplicas=1, maxReplicas=8)
    obj["spec"]["autoscaling"]["metric"] = {"type": "LLM", "llm": {"engine": "vllm", **llm}}
    return InferenceService.model_validate(obj)


def pods(ready: int, booting: int = 0) -> list[ServingPod]:
    def pod(n: int, is_ready: bool) -> ServingPod:
        return ServingPod(
            "ml", f"chat-h-{n}", "chat", "h", CapacityType.ON_DEMAND, None, "gpu-1", "Running", is_ready, False, 1
        )

    return [pod(n, n < ready) for n in range(ready + booting)]


@pytest.fixture
def kube() -> Iterator[KubeDouble]:
    double = KubeDouble()
    yield double
    assert not double.unexpected, f"calls the test did not set up: {double.unexpected}"


def autoscaler(kube: KubeDouble, servers: Servers) -> ServiceAutoscaler:
    client = httpx.AsyncClient(transport=httpx.MockTransport(servers))
    source = PrometheusSource("http://prometheus", client=client, retry=Retry(retries=0, clock=lambda: NOW))
    scaled: list[tuple[tuple[str, str], int]] = []
    return ServiceAutoscaler(Settings(), cast(KubeClient, kube), source, None, lambda k, n: scaled.append((k, n)))


async def decide_once(
    scaler: ServiceAutoscaler, service: InferenceService, fleet: list[ServingPod], now: datetime
) -> int:
    reading = await scaler.read_metric(("ml", "chat"), service, fleet)
    return await scaler.decide({"metadata": service.metadata}, service, service.status, reading, now)


async def test_a_full_kv_cache_asks_for_more_replicas(kube: KubeDouble) -> None:
    # Two replicas each 95% full, against a target fill of 80%: 1.9 / 0.8 = 2.4 -> 3 replicas.
    servers = Servers(
        {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 40, "vllm:kv_cache_usage_perc": 1.9}
    )
    scaler = autoscaler(kube, servers)
    service = llm_service(2)
    assert await decide_once(scaler, service, pods(2), NOW) == 3
    assert ("scale_custom", "chat") in kube.calls
    assert service.status.last_scaling is not None and "by kv" in service.status.last_scaling.reason
    assert all('namespace="ml"' in q and 'pod=~"chat\\\\-h\\\\-0|chat\\\\-h\\\\-1"' in q for q in servers.queries)
    assert scaler.llm_scalers.memory(("ml", "chat")) is not None


async def test_a_latency_breach_scales_the_ready_replicas(kube: KubeDouble) -> None:
    # p95 TTFT 2.8 s against 2 s at 0.7 headroom: 2 ready x min(2, 2.8 / 1.4) = 4.
    servers = Servers(
        {
            "vllm:num_requests_waiting": 0,
            "vllm:num_requests_running": 4,
            "vllm:kv_cache_usage_perc": 0.2,
            "vllm:time_to_first_token_seconds_bucket": 2.8,
        }
    )
    service = llm_service(2, objectives={"ttftSeconds": 2.0, "tpotSeconds": 0.1, "percentile": 0.95})
    assert await decide_once(autoscaler(kube, servers), service, pods(2), NOW) == 4
    assert any(q.startswith("histogram_quantile(0.95, sum by (le) (rate(") for q in servers.queries)


async def test_an_unread_queue_holds_the_count_and_says_why(kube: KubeDouble) -> None:
    service = llm_service(3)
    assert await decide_once(autoscaler(kube, Servers({})), service, pods(3), NOW) == 3
    assert ("scale_custom", "chat") not in kube.calls
    condition = next(c for c in service.status.conditions if c.type == "ScalingActive")
    assert (condition.status, condition.reason) == ("False", "MetricUnavailable")


async def test_a_quiet_service_shrinks_only_after_the_window_and_forget_drops_its_memory(kube: KubeDouble) -> None:
    busy = {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 40, "vllm:kv_cache_usage_perc": 3.6}
    servers = Servers(busy)
    scaler = autoscaler(kube, servers)
    assert await decide_once(scaler, llm_service(4), pods(4), NOW) == 5
    servers.values = {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 1, "vllm:kv_cache_usage_perc": 0.1}
    # Within scaleDownStabilizationSeconds (300 s) the recommendation of 5 still stands.
    servers.at = NOW + timedelta(seconds=60)
    assert await decide_once(scaler, llm_service(5), pods(5), servers.at) == 5
    servers.at = NOW + timedelta(seconds=400)
    assert await decide_once(scaler, llm_service(5), pods(5), servers.at) == 1
    scaler.forget(("ml", "chat"))
    assert scaler.llm_scalers.memory(("ml", "chat")) is None


async def test_a_stale_reading_holds_the_count(kube: KubeDouble) -> None:
    servers = Servers(
        {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 40, "vllm:kv_cache_usage_perc": 3.6}
    )
    later = NOW + timedelta(seconds=Settings().autoscaler.metric_max_age_seconds + 1)
    assert await decide_once(autoscaler(kube, servers), llm_service(2), pods(2), later) == 2
    assert ("scale_custom", "chat") not in kube.calls


async def test_the_cold_start_is_learned_from_the_replicas_own_boots_each_counted_once(kube: KubeDouble) -> None:
    """The spec's coldStartSeconds is the prior until a replica has booted; then the boots it saw lead the
    forecast, each replica's counted once however many readings see it ready."""
    servers = Servers({"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 4, "vllm:kv_cache_usage_perc": 1})
    scaler = autoscaler(kube, servers)
    service = llm_service(2, coldStartSeconds=300)
    fleet = pods(2)
    await decide_once(scaler, service, fleet, NOW)
    memory = scaler.llm_scalers.memory(("ml", "chat"))
    assert memory is not None and memory.cold_start.seconds() == 300.0  # none with a boot read: the prior
    booted = [replace(pod, boot_seconds=boot) for pod, boot in zip(fleet, (40.0, 50.0), strict=True)]
    for _ in range(3):
        await decide_once(scaler, service, booted, NOW)
    memory = scaler.llm_scalers.memory(("ml", "chat"))
    assert memory is not None and memory.cold_start.durations_s == (40.0, 50.0)
    assert memory.cold_start.seconds() == 50.0


async def test_a_restarted_operator_goes_on_with_the_window_its_annotation_keeps(kube: KubeDouble) -> None:
    """Busy, then quiet for longer than the scale-down window: the operator restarted meanwhile reads the window
    from the service's annotation and shrinks at once, not after a new window of its own."""
    busy = {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 40, "vllm:kv_cache_usage_perc": 3.6}
    servers = Servers(busy)
    assert await decide_once(autoscaler(kube, servers), llm_service(4), pods(4), NOW) == 5
    kept = kube.annotated["chat"][LLM_SCALING_MEMORY]
    assert [NOW.timestamp(), 5] in json.loads(kept)["recommendations"]

    servers.values = {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 1, "vllm:kv_cache_usage_perc": 0.1}
    servers.at = NOW + timedelta(seconds=400)
    remembering = llm_service(5)
    remembering.metadata.setdefault("annotations", {})[LLM_SCALING_MEMORY] = kept
    assert await decide_once(autoscaler(kube, servers), remembering, pods(5), servers.at) == 1
    # Without it, a first decision counts the fleet as it found it, and holds it for a window.
    assert await decide_once(autoscaler(kube, servers), llm_service(5), pods(5), servers.at) == 5


@pytest.mark.parametrize(
    "kept",
    ["{", "[]", '{"recommendations": [[1e300, 1000]]}', '{"recommendations": [["x", 1]]}', '{"changes": 3}'],
    ids=["truncated", "not_an_object", "from_the_future", "not_a_time", "not_a_list"],
)
async def test_a_forged_or_broken_memory_gives_a_fresh_one(kube: KubeDouble, kept: str) -> None:
    servers = Servers({"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 1, "vllm:kv_cache_usage_perc": 0.1})
    servers.at = NOW + timedelta(seconds=400)
    service = llm_service(5)
    service.metadata.setdefault("annotations", {})[LLM_SCALING_MEMORY] = kept
    assert await decide_once(autoscaler(kube, servers), service, pods(5), servers.at) == 5  # as a first decision


async def test_the_load_history_is_written_as_each_bucket_completes_and_a_restart_reads_it(kube: KubeDouble) -> None:
    """Deciding each minute, the history annotation changes once per five-minute bucket, not at each
    decision; a restarted operator that reads it forecasts from that history, not from nothing."""
    values = {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 4, "vllm:kv_cache_usage_perc": 0.4}
    servers = Servers({**values, "vllm:time_to_first_token_seconds_count": 5.0})
    scaler = autoscaler(kube, servers)
    start = datetime.fromtimestamp(math.ceil(NOW.timestamp() / LOAD_BUCKET_S) * LOAD_BUCKET_S, tz=NOW.tzinfo)
    written = []
    for minute in range(16):
        servers.at = start + timedelta(minutes=minute)
        await decide_once(scaler, llm_service(4), pods(4), servers.at)
        written.append(kube.annotated["chat"].get(LLM_LOAD_HISTORY))
    changes = [m for m in range(1, 16) if written[m] != written[m - 1]]
    assert changes == [5, 10, 15], changes  # the decision that starts a bucket writes the one before
    kept = json.loads(cast(str, written[-1]))
    assert kept["rates"] == [5.0, 5.0, 5.0]

    restarted = autoscaler(kube, servers)
    remembering = llm_service(4)
    remembering.metadata.setdefault("annotations", {}).update(kube.annotated["chat"])
    kube.annotated["chat"] = {}  # what is written from here on
    servers.at = start + timedelta(minutes=16)
    await decide_once(restarted, remembering, pods(4), servers.at)
    memory = restarted.llm_scalers.memory(("ml", "chat"))
    assert memory is not None and len(memory.load.samples) == 16  # 15 read back, one new
    # What it read is counted as written: nothing is written again before the next bucket completes.
    assert LLM_LOAD_HISTORY not in kube.annotated["chat"]
    assert restarted.llm_scalers.load_to_write(("ml", "chat")) is None
