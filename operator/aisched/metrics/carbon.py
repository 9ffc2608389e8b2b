"""Carbon-aware deferral: deferrals, estimated emissions and savings, grid intensity."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from aisched.metrics.labels import CARBON_MODES, CARBON_SOURCES, KINDS, PREFIX, check, one_of

# Grid intensity is quoted in g/kWh everywhere; we export base units (g/J).
JOULES_PER_KWH = 3.6e6


class CarbonMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.deferrals = Counter(
            f"{PREFIX}_deferrals",
            f"Workloads (TrainingJobs and other kinds) deferred to a cleaner time, by mode ({one_of(CARBON_MODES)}).",
            ["mode"],
            registry=r,
        )
        self.carbon_emitted = Counter(
            f"{PREFIX}_carbon_emitted_grams",
            f"Estimated CO2-equivalent emitted by aisched's GPUs, by kind ({one_of(KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.carbon_avoided = Counter(
            f"{PREFIX}_carbon_avoided_grams",
            f"Estimated CO2-equivalent avoided by deferral against starting at once, by kind ({one_of(KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.grid_intensity = Gauge(
            f"{PREFIX}_grid_carbon_intensity_grams_per_joule",
            "Latest grid carbon intensity the source reported, by region (a configured grid region); "
            "multiply by 3.6e6 for g/kWh.",
            ["region"],
            registry=r,
        )
        self.carbon_source_errors = Counter(
            f"{PREFIX}_carbon_source_errors",
            f"Failed carbon-intensity lookups, by source ({one_of(CARBON_SOURCES)}).",
            ["source"],
            registry=r,
        )

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        return (self.grid_intensity,)

    def record_deferral(self, mode: str) -> None:
        self.deferrals.labels(check("mode", mode, CARBON_MODES)).inc()

    def record_carbon(self, kind: str, *, emitted_grams: float, avoided_grams: float = 0.0) -> None:
        """Add estimated emissions (and savings from deferral) since the last call for this work."""
        self.carbon_emitted.labels(check("kind", kind, KINDS)).inc(emitted_grams)
        if avoided_grams:
            self.carbon_avoided.labels(kind).inc(avoided_grams)

    def record_grid_intensity(self, region: str, grams_per_kwh: float) -> None:
        self.grid_intensity.labels(region).set(grams_per_kwh / JOULES_PER_KWH)

    def record_carbon_source_error(self, source: str) -> None:
        self.carbon_source_errors.labels(check("source", source, CARBON_SOURCES)).inc()
