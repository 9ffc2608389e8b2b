"""Plain-text table of a simulation: the figures of each policy side by side."""

from __future__ import annotations

from aisched.sim.engine import SimulationReport
from aisched.sim.outcomes import SIZE_CLASSES


def render_report(report: SimulationReport) -> str:
    lines = [
        f"trace {report.trace}: {report.jobs} jobs ({report.multi_gpu_jobs} multi-GPU"
        + (f"; {report.too_big_jobs} larger than the cluster left out" if report.too_big_jobs else "")
        + f"), cluster {report.nodes} nodes / {report.gpus} GPUs; durations known: {report.options.knowledge.value}",
        "",
        f"{'policy':<16}{'eff util':>9}{'avg JCT':>10}{'p95 JCT':>10}{'1 GPU':>9}{'2-8':>9}{'>8':>9}"
        f"{'smallest dom':>13}{'p99 slowdn':>11}{'preempt/job':>12}{'resize/job':>11}{'lost GPU-s/job':>15}"
        f"{'unfinished':>11}",
    ]
    for name, policy in report.policies.items():
        smallest = "-" if policy.in_smallest_domain is None else f"{policy.in_smallest_domain:.1%}"
        sizes = "".join(f"{_maybe(policy.avg_jct_by_size_s.get(size)):>9}" for size in SIZE_CLASSES)
        lines.append(
            f"{name:<16}{policy.effective_utilization:>9.1%}{_duration(policy.avg_jct_s):>10}"
            f"{_duration(policy.p95_jct_s):>10}{sizes}{smallest:>13}{policy.p99_slowdown:>11.1f}"
            f"{policy.preemptions_per_job:>12.2f}{policy.resizes_per_job:>11.2f}"
            f"{policy.lost_gpu_seconds_per_job:>15.0f}{policy.unfinished_jobs:>11}"
        )
    return "\n".join(lines)


def _maybe(seconds: float | None) -> str:
    return "-" if seconds is None else _duration(seconds)


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 120:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"
