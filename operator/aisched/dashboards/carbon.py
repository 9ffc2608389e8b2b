"""The dashboard of carbon-aware deferral."""

from __future__ import annotations

from aisched.dashboards.grafana import Dashboard, Panel, Query, Variable
from aisched.dashboards.promql import PER_HOUR, RANGE, RATE


def carbon() -> Dashboard:
    emitted = f"sum(increase(aisched_carbon_emitted_grams_total[{RANGE}]))"
    avoided = f"sum(increase(aisched_carbon_avoided_grams_total[{RANGE}]))"

    def stat(title: str, description: str, expr: str, unit: str) -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", unit=unit, width=6, height=4)

    return Dashboard(
        uid="aisched-carbon",
        title="aisched / Carbon",
        description="Estimated emissions, what deferral saved, and the grid intensity that drove it.",
        variables=(Variable("region", "Grid region", "aisched_grid_carbon_intensity_grams_per_joule"),),
        panels=(
            stat("Emitted in range", "Estimated CO2e of aisched's GPUs.", emitted, "massg"),
            stat("Avoided by deferral in range", "Against starting each deferred job at once.", avoided, "massg"),
            stat(
                "Avoided share",
                "Avoided / (emitted + avoided).",
                f"{avoided} / clamp_min({avoided} + {emitted}, 1)",
                "percentunit",
            ),
            stat(
                "Deferred now",
                "TrainingJobs waiting for a cleaner grid.",
                'sum(max by (queue, phase) (aisched_jobs{phase="Deferred"}))',
                "short",
            ),
            Panel(
                "Grid carbon intensity (g/kWh)",
                "Latest value from the configured source, per region.",
                (
                    Query(
                        'max by (region) (aisched_grid_carbon_intensity_grams_per_joule{region=~"$region"}) * 3.6e6',
                        "{{region}}",
                    ),
                ),
            ),
            Panel(
                "Emissions and savings per hour",
                "Estimated CO2e emitted, and avoided by deferral.",
                (
                    Query(
                        f"sum by (kind) (rate(aisched_carbon_emitted_grams_total[{RATE}])) {PER_HOUR}",
                        "emitted {{kind}}",
                    ),
                    Query(
                        f"sum by (kind) (rate(aisched_carbon_avoided_grams_total[{RATE}])) {PER_HOUR}",
                        "avoided {{kind}}",
                    ),
                ),
                unit="massg",
            ),
            Panel(
                "Deferred jobs by queue",
                "Jobs in phase Deferred.",
                (Query('sum by (queue) (max by (queue, phase) (aisched_jobs{phase="Deferred"}))', "{{queue}}"),),
                stacked=True,
            ),
            Panel(
                "Deferrals per hour",
                "By planning mode.",
                (Query(f"sum by (mode) (rate(aisched_deferrals_total[{RATE}])) {PER_HOUR}", "{{mode}}"),),
            ),
            Panel(
                "Measured GPU power (DCGM)",
                "Power of the GPUs of aisched's pods; empty without the DCGM exporter.",
                (Query("sum by (kind) (aisched_job:dcgm_gpu_power_watts:sum)", "{{kind}}"),),
                unit="watt",
                stacked=True,
            ),
            Panel(
                "Carbon source errors per hour",
                "Failed lookups; jobs still start in time for their deadlines.",
                (
                    Query(
                        f"sum by (source) (rate(aisched_carbon_source_errors_total[{RATE}])) {PER_HOUR}", "{{source}}"
                    ),
                ),
            ),
        ),
    )
