"""Engine presets: which Prometheus series an LLM server exports for the signals scaling reads.

Names as the engines document them (checked December 2026):
- vLLM (docs.vllm.ai, "Production Metrics", V1 engine): vllm:num_requests_waiting,
  vllm:num_requests_running, vllm:kv_cache_usage_perc (a fraction, 0-1),
  vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds (histograms).
- SGLang (docs.sglang.io, "Production Metrics", with --enable-metrics): sglang:num_queue_reqs,
  sglang:num_running_reqs, sglang:token_usage (fraction of the KV pool in use),
  sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds.
- TGI (huggingface.co/docs/text-generation-inference/reference/metrics): tgi_queue_size,
  tgi_batch_current_size; it exports no KV-usage gauge (None: that signal is not read) and no TTFT
  histogram of its own; tgi_request_mean_time_per_token_duration serves as the TPOT series.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnginePreset:
    """Series names for one engine; None where the engine does not export that signal."""

    engine: str
    waiting: str
    running: str
    kv_usage: str | None
    ttft_histogram: str | None
    tpot_histogram: str | None


VLLM = EnginePreset(
    engine="vllm",
    waiting="vllm:num_requests_waiting",
    running="vllm:num_requests_running",
    kv_usage="vllm:kv_cache_usage_perc",
    ttft_histogram="vllm:time_to_first_token_seconds",
    tpot_histogram="vllm:inter_token_latency_seconds",
)
SGLANG = EnginePreset(
    engine="sglang",
    waiting="sglang:num_queue_reqs",
    running="sglang:num_running_reqs",
    kv_usage="sglang:token_usage",
    ttft_histogram="sglang:time_to_first_token_seconds",
    tpot_histogram="sglang:inter_token_latency_seconds",
)
TGI = EnginePreset(
    engine="tgi",
    waiting="tgi_queue_size",
    running="tgi_batch_current_size",
    kv_usage=None,
    ttft_histogram=None,
    tpot_histogram="tgi_request_mean_time_per_token_duration",
)
ENGINE_PRESETS: dict[str, EnginePreset] = {preset.engine: preset for preset in (VLLM, SGLANG, TGI)}


def engine_preset(engine: str, overrides: dict[str, str] | None = None) -> EnginePreset:
    """The preset for ENGINE with a tenant's own series names in OVERRIDES; KeyError for an unknown engine or field.

    The names are untrusted: only the preset's own fields may be overridden, and each must be a
    plain Prometheus metric name (letters, digits, '_' and ':'), so nothing else reaches a query.
    """
    preset = ENGINE_PRESETS[engine]
    if not overrides:
        return preset
    fields = {"waiting", "running", "kv_usage", "ttft_histogram", "tpot_histogram"}
    values = {name: getattr(preset, name) for name in fields}
    for name, value in overrides.items():
        if name not in fields:
            raise KeyError(f"{name}: not a signal of an engine preset (one of {', '.join(sorted(fields))})")
        if not is_metric_name(value):
            raise ValueError(f"{value!r}: not a Prometheus metric name")
        values[name] = value
    return EnginePreset(engine=preset.engine, **values)


def is_metric_name(name: str) -> bool:
    """Prometheus's metric-name grammar, [a-zA-Z_:][a-zA-Z0-9_:]*, at most 200 characters."""
    if not name or len(name) > 200 or not (name[0].isascii() and (name[0].isalpha() or name[0] in "_:")):
        return False
    return all(c.isascii() and (c.isalnum() or c in "_:") for c in name)
