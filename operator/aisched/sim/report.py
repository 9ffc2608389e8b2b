"""Plain-text tables of a simulation: the summary per policy and GPU utilisation over time."""

from __future__ import annotations

from aisched.sim.engine import SimulationReport


def render_report(report: SimulationReport) -> str:
    lines = [
        f"trace {report.trace}: {report.jobs} jobs ({report.multi_gpu_jobs} multi-GPU"
        + (f"; {report.too_big_jobs} larger than the cluster left out" if report.too_big_jobs else "")
        + f"), cluster {report.nodes} nodes / {report.gpus} GPUs",
        "",
        f"{'policy':<16}{'GPU util':>9}{'avg JCT':>11}{'p95 JCT':>11}{'avg queue':>11}"
        f"{'multi-GPU JCT':>15}{'in smallest domain':>20}{'unfinished':>12}",
    ]
    for name, policy in report.policies.items():
        smallest = "-" if policy.in_smallest_domain is None else f"{policy.in_smallest_domain:.1%}"
        lines.append(
            f"{name:<16}{policy.gpu_utilization:>9.1%}{_duration(policy.avg_jct_s):>11}"
            f"{_duration(policy.p95_jct_s):>11}{_duration(policy.avg_queue_s):>11}"
            f"{_duration(policy.avg_jct_multi_gpu_s):>15}{smallest:>20}{policy.unfinished_jobs:>12}"
        )
    lines += ["", "GPU utilisation over time (busy share of all GPUs; time from the first arrival)"]
    names = list(report.policies)
    lines.append(f"{'from':>10}" + "".join(f"{name:>16}" for name in names))
    timelines = [report.policies[name].timeline for name in names]
    longest = max(timelines, key=len, default=())
    for row, (start, _) in enumerate(longest):
        cells = "".join(f"{t[row][1]:>16.1%}" if row < len(t) else f"{'':>16}" for t in timelines)
        lines.append(f"{_duration(start):>10}{cells}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 120:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"
