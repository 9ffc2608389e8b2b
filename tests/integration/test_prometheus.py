"""A real Prometheus (Debian's package) scrapes aisched's metrics and evaluates the chart's
rules; every dashboard query and variable then runs against it without error and returns
data, and every rule evaluates cleanly, with the alerts that the data calls for pending.

Targets: `sample` is tests/integration/sample_metrics.py (aisched's Metrics with activity
recorded, plus a DCGM exporter stand-in); `operator` is the operator the `operator` fixture
runs against the local cluster with the example jobs applied (skipped until it serves
aisched's metrics).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from aisched.testing.cluster import REPO_ROOT, LocalCluster, free_ports, wait_for
from tests.metrics_catalog import all_queries, load_dashboards, metric_names_in
from tests.paths import RULES_FILE

pytestmark = pytest.mark.integration
EXAMPLES = REPO_ROOT / "manifests" / "examples"
STARTUP_SECONDS = 60


@dataclass
class Targets:
    """host:port of what serves aisched's metrics, and of DCGM exporters."""

    aisched: list[str]
    dcgm: list[str] = field(default_factory=list)


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body


def _serves_metrics(target: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=1) as response:
            return b"aisched_build_info" in response.read()
    except OSError:
        return False


class Prometheus:
    def __init__(self, binary: str, workdir: Path, targets: Targets) -> None:
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_FILE)],
            "scrape_configs": [
                # honor_labels as the chart's ServiceMonitor: per-job series keep their namespace and pod.
                {"job_name": "aisched", "honor_labels": True, "static_configs": [{"targets": targets.aisched}]},
                {"job_name": "dcgm-exporter", "honor_labels": True, "static_configs": [{"targets": targets.dcgm}]},
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = (workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for(self._ready, STARTUP_SECONDS, "Prometheus to be ready")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self.process.returncode}; see {self.log.name}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = _get(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str, metric: str) -> list[str]:
        body = _get(f"{self.url}/api/v1/label/{label}/values?{urllib.parse.urlencode({'match[]': metric})}")
        values: list[str] = body["data"]
        return values

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in _get(f"{self.url}/api/v1/rules")["data"]["groups"] for rule in group["rules"]]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("prometheus is not installed: apt-get install -y prometheus (Debian's package)")
    return found


@pytest.fixture(scope="module")
def sample_targets() -> Iterator[Targets]:
    port, dcgm_port = free_ports(2)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.sample_metrics", "--port", str(port), "--dcgm-port", str(dcgm_port)],
        cwd=REPO_ROOT,
    )
    try:
        wait_for(lambda: _serves_metrics(f"127.0.0.1:{port}"), STARTUP_SECONDS, "the sample metrics server")
        yield Targets(aisched=[f"127.0.0.1:{port}"], dcgm=[f"127.0.0.1:{dcgm_port}"])
    finally:
        process.terminate()
        process.wait(timeout=10)


def _started(binary: str, workdir: Path, targets: Targets, *, dcgm: bool) -> Prometheus:
    server = Prometheus(binary, workdir, targets)
    # Two scrapes and a rule evaluation in: rates over a window need two samples.
    wait_for(lambda: server.query("sum(rate(aisched_reconcile_duration_seconds_count[1m])) > 0"), 30, "rates")
    wait_for(lambda: all(rule.get("lastEvaluation", "0001").startswith("20") for rule in server.rules()), 30)
    if dcgm:  # a DCGM exporter is scraped too: the recording rules must have recorded
        recorded = [rule["name"] for rule in server.rules() if rule["type"] == "recording"]
        wait_for(lambda: all(server.query(name) for name in recorded), 30, "recording rules to record")
    return server


@pytest.fixture(scope="module")
def sample_prometheus(
    prometheus_binary: str, sample_targets: Targets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    server = _started(prometheus_binary, tmp_path_factory.mktemp("prometheus"), sample_targets, dcgm=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def operator_prometheus(
    request: pytest.FixtureRequest, prometheus_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """Prometheus over the operator the conftest runs, with the example jobs applied."""
    try:
        operator = request.getfixturevalue("operator")
        cluster: LocalCluster = request.getfixturevalue("cluster")
    except pytest.FixtureLookupError:
        pytest.skip("no `operator` fixture in tests/integration/conftest.py")
    target = f"127.0.0.1:{operator.metrics_port}"
    if not _serves_metrics(target):
        pytest.skip("the operator does not serve aisched's metrics yet")
    namespace = "aisched-prometheus-test"
    cluster.kubectl("create", "namespace", namespace)
    # Scraping starts before the examples arrive, so their admissions land inside the rate windows.
    server = Prometheus(prometheus_binary, tmp_path_factory.mktemp("prometheus"), Targets(aisched=[target]))
    try:
        # Two waves: the first makes the histograms' series exist in Prometheus, so the second
        # wave's admissions show as increases (a series first seen at N has no rate yet).
        first, *rest = sorted(EXAMPLES.glob("trainingjob-*.yaml"))
        # queues.yaml stays out: Queues are cluster-wide and would change quotas for later tests.
        cluster.kubectl("apply", "-n", namespace, "-f", str(first))
        wait_for(lambda: server.query("aisched_queue_wait_seconds_count"), 60, "the first admission to be scraped")
        for example in [*rest, *sorted(EXAMPLES.glob("inferenceservice*.yaml"))]:
            cluster.kubectl("apply", "-n", namespace, "-f", str(example))
        # Once every job has a phase, the operator's gauges describe admitted and running work.
        wait_for(lambda: _all_have_a_phase(cluster, namespace), 60, "the examples to be reconciled")
        wait_for(
            lambda: server.query("sum(rate(aisched_placement_duration_seconds_count[1m])) > 0"),
            60,
            "the admissions to show in a scraped rate",
        )
        wait_for(lambda: all(rule.get("lastEvaluation", "0001").startswith("20") for rule in server.rules()), 30)
        yield server
    finally:
        server.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def _all_have_a_phase(cluster: LocalCluster, namespace: str) -> bool:
    listed = cluster.kubectl("get", "trainingjobs,inferenceservices", "-n", namespace, "-o", "json")
    items = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
    return bool(items) and all(item.get("status", {}).get("phase") for item in items)


@pytest.fixture(params=["sample", "operator"])
def prometheus(request: pytest.FixtureRequest) -> Prometheus:
    server: Prometheus = request.getfixturevalue(f"{request.param}_prometheus")
    return server


def _exported(prometheus: Prometheus) -> set[str]:
    names = prometheus.label_values("__name__", '{job=~"aisched|dcgm-exporter"}')
    recorded = {rule["name"] for rule in prometheus.rules() if rule["type"] == "recording"}
    return set(names) | {name for name in recorded if prometheus.query(name)}


def test_every_rule_evaluates_without_error(prometheus: Prometheus) -> None:
    rules = prometheus.rules()
    on_file = yaml.safe_load(RULES_FILE.read_text())
    assert len(rules) == sum(len(group["rules"]) for group in on_file["groups"])
    for rule in rules:
        assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"


def test_every_dashboard_query_runs_and_returns_data(prometheus: Prometheus, request: pytest.FixtureRequest) -> None:
    exported, queries = _exported(prometheus), all_queries()
    empty, checked = [], 0
    for where, expr in queries:
        result = prometheus.query(expr)
        values = [float(sample["value"][1]) for sample in result]
        if metric_names_in(expr) <= exported:
            checked += 1
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{where}: {expr}")
    assert not empty, "queries over exported series returned no data:\n" + "\n".join(empty)
    assert checked, "no query is over series the target exports"
    if "sample" in request.node.callspec.id:
        assert checked == len(queries), "the sample exports every series the dashboards use"


def test_every_dashboard_variable_lists_values(prometheus: Prometheus) -> None:
    exported = _exported(prometheus)
    for name, dashboard in load_dashboards().items():
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            metric, label = variable["definition"].removeprefix("label_values(").removesuffix(")").split(", ")
            if metric in exported:
                assert prometheus.label_values(label, metric), f"{name}: ${variable['name']} lists nothing"


def test_alerts_follow_the_scraped_data(prometheus: Prometheus, request: pytest.FixtureRequest) -> None:
    active = {sample["metric"]["alertname"] for sample in prometheus.query("ALERTS")}
    assert "AischedDown" not in active, "the operator is scraped: AischedDown must stay quiet"
    assert "AischedNoLeader" not in active, "a replica leads: AischedNoLeader must stay quiet"
    if "sample" in request.node.callspec.id:
        # The sample reports a job 2 minutes late and one queued since January.
        assert {"AischedDeadlineAtRisk", "AischedJobQueuedTooLong"} <= active
