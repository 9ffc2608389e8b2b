"""PromQL the dashboards share: Grafana's interval variables and the aggregations of aisched's gauges."""

from __future__ import annotations

RATE = "$__rate_interval"
RANGE = "$__range"
PER_HOUR = "* 3600"


def pool_gauge(metric: str) -> str:
    return f'max by (gpu_type, capacity_type) ({metric}{{gpu_type=~"$gpu_type", capacity_type=~"$capacity_type"}})'


def job_census(phase_matcher: str, by: str = "") -> str:
    census = f'max by (queue, phase) (aisched_jobs{{queue=~"$queue", {phase_matcher}}})'
    return f"sum{f' by ({by})' if by else ''} ({census})"


def quantile(q: float, histogram: str, selector: str = "", by: str = "") -> str:
    labels = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({histogram}_bucket{selector}[{RATE}])))"
