"""The LLM signals' queries: the preset's series, confined to the service's namespace and pods."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aisched.api.inference_service import LlmMetricSpec, MetricSpec
from aisched.sources.llm_signals import llm_queries
from aisched.sources.prometheus import builtin_query


def llm(**fields: object) -> LlmMetricSpec:
    return LlmMetricSpec.model_validate(fields)


def test_vllm_queries_read_the_presets_series_of_the_named_pods() -> None:
    queries = llm_queries(llm(), "ml", ["chat-0", "chat-1"])
    pods = 'namespace="ml",pod=~"chat\\\\-0|chat\\\\-1"'
    assert queries.waiting == f'sum({{__name__="vllm:num_requests_waiting",{pods}}})'
    assert queries.kv_usage == f'sum({{__name__="vllm:kv_cache_usage_perc",{pods}}})'
    assert queries.ttft == (
        "histogram_quantile(0.95, sum by (le) "
        f'(rate({{__name__="vllm:time_to_first_token_seconds_bucket",{pods}}}[1m])))'
    )
    assert queries.arrival_rate == f'sum(rate({{__name__="vllm:time_to_first_token_seconds_count",{pods}}}[1m]))'


def test_the_objectives_percentile_is_the_quantile_asked() -> None:
    queries = llm_queries(llm(objectives={"percentile": 0.99}), "ml", ["p"])
    assert queries.tpot is not None and queries.tpot.startswith("histogram_quantile(0.99,")


def test_tgi_reads_no_kv_and_counts_arrivals_on_its_tpot_histogram() -> None:
    queries = llm_queries(llm(engine="tgi"), "ml", ["p"])
    assert (queries.kv_usage, queries.ttft) == (None, None)
    assert queries.arrival_rate is not None and "tgi_request_mean_time_per_token_duration_count" in queries.arrival_rate


def test_renamed_series_replace_the_presets() -> None:
    queries = llm_queries(llm(engine="sglang", series={"waiting": "my_queue"}), "ml", ["p"])
    assert '__name__="my_queue"' in queries.waiting
    assert '__name__="sglang:num_running_reqs"' in queries.running


def test_a_hostile_namespace_or_pod_name_stays_inside_its_string() -> None:
    queries = llm_queries(llm(), 'ml"} or {namespace=~".+', ['p"}) or vector(1) #'])
    for query in (queries.waiting, queries.running, queries.kv_usage, queries.ttft):
        assert query is not None
        assert 'namespace="ml\\"} or {namespace=~\\".+"' in query
        assert 'namespace=~".+"' not in query


@pytest.mark.parametrize(
    "series", ['x"} or vector(1)', "9starts_with_digit", "has space", "a" * 201, 'q{namespace="other"}']
)
def test_series_names_must_be_plain_metric_names(series: str) -> None:
    with pytest.raises(ValidationError):
        llm(series={"waiting": series})


def test_type_llm_needs_its_block_and_no_target() -> None:
    assert MetricSpec.model_validate({"type": "LLM", "llm": {}}).target_per_replica is None
    with pytest.raises(ValidationError, match=r"metric type LLM needs metric\.llm"):
        MetricSpec.model_validate({"type": "LLM"})
    with pytest.raises(ValidationError, match="targetPerReplica is needed unless the type is LLM"):
        MetricSpec.model_validate({"type": "Concurrency"})


@pytest.mark.parametrize(
    "fields",
    [
        {"engine": "triton"},
        {"objectives": {"percentile": 1.0}},
        {"objectives": {"ttftSeconds": 0}},
        {"kvUsageTarget": 1.5},
        {"replicaCapacityRps": -1},
    ],
)
def test_out_of_range_llm_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        llm(**fields)


def test_the_single_value_builtin_query_refuses_type_llm() -> None:
    with pytest.raises(ValueError, match="llm_signals"):
        builtin_query(MetricSpec.model_validate({"type": "LLM", "llm": {}}), "ml", ["p"])
