"""The dashboard of spot interruptions, lost work, checkpoints and on-demand fallbacks."""

from __future__ import annotations

from aisched.dashboards.grafana import Dashboard, Panel, Query, Variable
from aisched.dashboards.promql import PER_HOUR, RANGE, RATE


def spot() -> Dashboard:
    selector = '{capacity_type=~"$capacity_type"}'

    def stat(title: str, description: str, expr: str) -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", width=6, height=4)

    return Dashboard(
        uid="aisched-spot",
        title="aisched / Spot interruptions and lost work",
        description="Capacity interruptions, the work they cost, checkpoints and on-demand fallbacks.",
        variables=(Variable("capacity_type", "Capacity", "aisched_gpus_allocatable"),),
        panels=(
            stat(
                "Interruptions in range",
                "Gangs that lost capacity.",
                f"sum(increase(aisched_interruptions_total{selector}[{RANGE}]))",
            ),
            stat(
                "Lost GPU-hours in range",
                "GPU time since the last checkpoint at each interruption.",
                f"sum(increase(aisched_lost_gpu_seconds_total{selector}[{RANGE}])) / 3600",
            ),
            stat(
                "Checkpoints in range",
                "Checkpoints workers reported.",
                f"sum(increase(aisched_checkpoints_total[{RANGE}]))",
            ),
            stat(
                "On-demand fallbacks in range",
                "Spot-preferring jobs moved to on-demand to meet a deadline.",
                f"sum(increase(aisched_on_demand_fallbacks_total[{RANGE}]))",
            ),
            Panel(
                "Interruptions per hour",
                "By capacity type and the signal that announced them.",
                (
                    Query(
                        "sum by (capacity_type, signal) "
                        f"(rate(aisched_interruptions_total{selector}[{RATE}])) {PER_HOUR}",
                        "{{capacity_type}} {{signal}}",
                    ),
                ),
            ),
            Panel(
                "Work lost, in GPUs",
                "Lost GPU-seconds per second: how many GPUs' work is thrown away on average.",
                (
                    Query(
                        f"sum by (capacity_type) (rate(aisched_lost_gpu_seconds_total{selector}[{RATE}]))",
                        "{{capacity_type}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Lost share of admitted GPU time",
                "Lost GPU time / GPUs held by admitted jobs (the AischedLostWorkHigh ratio).",
                (
                    Query(
                        f"sum(rate(aisched_lost_gpu_seconds_total[{RATE}])) / "
                        "clamp_min(sum(max by (queue) (aisched_queue_gpus_used)), 1)",
                        "lost",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Allocated GPUs by capacity type",
                "Where the GPUs in use come from.",
                (
                    Query(
                        f"sum by (capacity_type) (max by (gpu_type, capacity_type) (aisched_gpus_allocated{selector}))",
                        "{{capacity_type}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Checkpoints per hour",
                "By what asked for them.",
                (Query(f"sum by (reason) (rate(aisched_checkpoints_total[{RATE}])) {PER_HOUR}", "{{reason}}"),),
            ),
            Panel(
                "Gang restarts per hour",
                "By cause.",
                (Query(f"sum by (reason) (rate(aisched_gang_restarts_total[{RATE}])) {PER_HOUR}", "{{reason}}"),),
            ),
        ),
    )
