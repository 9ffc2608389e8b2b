"""What the scale benchmark reads while it runs: the operator's memory, its metrics, the API server's requests."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

MIB = 1024 * 1024


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident, peak resident) MiB of PID: VmRSS and VmHWM; (0, 0) once it has gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0, 0.0
    fields = {line.split(":")[0]: line.split()[1] for line in lines if line.startswith(("VmRSS", "VmHWM"))}
    return int(fields.get("VmRSS", 0)) / 1024, int(fields.get("VmHWM", 0)) / 1024


@dataclass(frozen=True)
class HistogramState:
    """One Prometheus histogram read at a moment: cumulative counts per upper bound, count and sum."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    total: float

    def since(self, before: HistogramState) -> HistogramState:
        earlier = dict(before.buckets)
        return HistogramState(
            tuple((bound, value - earlier.get(bound, 0.0)) for bound, value in self.buckets),
            self.count - before.count,
            self.total - before.total,
        )

    def quantile(self, q: float) -> float:
        """As PromQL's histogram_quantile: linear inside the bucket the rank falls in."""
        if self.count <= 0:
            return 0.0
        rank, lower, below = q * self.count, 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if bound == float("inf"):
                    return lower
                share = (rank - below) / (cumulative - below) if cumulative > below else 1.0
                return lower + (bound - lower) * share
            lower, below = bound, cumulative
        return lower


CYCLE = "aisched_scheduling_cycle_seconds"
CYCLE_CPU = "aisched_scheduling_cycle_cpu_seconds"
GC_PAUSE = "aisched_gc_pause_seconds"
FULL_COLLECTION = "2"


@dataclass(frozen=True)
class OperatorReading:
    cycle: HistogramState
    cycle_cpu: HistogramState
    """The same cycles' CPU time on the operator's event-loop thread."""
    full_gc: HistogramState
    """Pauses of the operator's full garbage collections."""
    jobs_by_phase: dict[str, float]


def read_operator(metrics_port: int) -> OperatorReading:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        return operator_reading(response.read().decode())


def operator_reading(text: str) -> OperatorReading:
    """The figures the benchmark follows, out of the operator's /metrics text."""
    histograms: dict[str, tuple[list[tuple[float, float]], list[float]]] = {
        name: ([], [0.0, 0.0]) for name in (CYCLE, CYCLE_CPU, GC_PAUSE)
    }
    phases: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, _, part = sample.name.rpartition("_")
            if name == GC_PAUSE and sample.labels.get("generation") != FULL_COLLECTION:
                continue
            if name in histograms:
                buckets, count_and_sum = histograms[name]
                if part == "bucket":
                    buckets.append((float(sample.labels["le"]), sample.value))
                elif part in ("count", "sum"):
                    count_and_sum[part == "sum"] = sample.value
            elif sample.name == "aisched_jobs":
                phase = sample.labels.get("phase", "")
                phases[phase] = phases.get(phase, 0.0) + sample.value

    def state(name: str) -> HistogramState:
        buckets, (count, total) = histograms[name]
        return HistogramState(tuple(sorted(buckets)), count, total)

    return OperatorReading(state(CYCLE), state(CYCLE_CPU), state(GC_PAUSE), phases)


def api_requests_by_verb(api: client.ApiClient) -> dict[str, float]:
    """Requests the API server has served so far, by verb (every client's)."""
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                verb = sample.labels.get("verb", "")
                totals[verb] = totals.get(verb, 0.0) + sample.value
    return totals


@dataclass(frozen=True)
class Sample:
    at: float
    rss_mib: float
    cycle: HistogramState
    jobs_by_phase: dict[str, float]


@dataclass
class Sampler:
    """Reads the operator every INTERVAL seconds on a thread of its own, until stopped."""

    pid: int
    metrics_port: int
    interval: float = 5.0
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="operator-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reading = read_operator(self.metrics_port)
            except OSError:
                reading = None  # a busy operator may miss one scrape; the next one counts
            if reading is not None:
                rss, _ = memory_mib(self.pid)
                self.samples.append(Sample(time.monotonic(), rss, reading.cycle, reading.jobs_by_phase))
            self._stop.wait(self.interval)


def cycle_curve(samples: Sequence[Sample]) -> list[dict[str, float]]:
    """Per sampling interval: jobs waiting, the mean scheduling cycle in it, and the operator's RSS."""
    curve = []
    for before, after in itertools.pairwise(samples):
        cycles = after.cycle.since(before.cycle)
        if cycles.count <= 0:
            continue
        curve.append(
            {
                "queued_jobs": after.jobs_by_phase.get("Queued", 0.0),
                "running_jobs": after.jobs_by_phase.get("Running", 0.0),
                "mean_cycle_s": round(cycles.total / cycles.count, 4),
                "rss_mib": round(after.rss_mib, 1),
            }
        )
    return curve


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
