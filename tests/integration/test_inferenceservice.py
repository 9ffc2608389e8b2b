"""InferenceServices end to end: the operator against the local GPU cluster, autoscaling on a real Prometheus.

Prometheus (Debian's package) scrapes a load exporter this module runs: it
serves `http_requests_total{namespace, pod}` for every replica, the request
rate of each service set by the test and split evenly over its Ready replicas,
as the Service in front would split it. The operator is restarted for this
module with the autoscaler pointed at that Prometheus, evaluating every second
over a 5 s rate window, so scaling takes seconds rather than minutes.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from aisched.testing.cluster import (
    LocalCluster,
    apply,
    free_ports,
    get_object,
    list_objects,
    taint_for_interruption,
    wait_for,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import InferenceServiceBuilder, an_inference_service

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("autoscaling_operator")]
TIMEOUT = 45
SERVICE_LABEL = "aisched.io/inference-service"
TEMPLATE_HASH = "aisched.io/template-hash"
RATE_WINDOW = "5s"
EVALUATION_SLACK = 2  # seconds: one autoscaler interval and one scrape interval


# -- the load exporter and Prometheus ------------------------------------------


class LoadExporter(Collector):
    """Requests served by each replica: a service's request rate split over its Ready replicas."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self._core = core
        self._lock = threading.Lock()
        self._rates: dict[tuple[str, str], float] = {}
        self._served: dict[tuple[str, str], float] = defaultdict(float)
        self._last = time.monotonic()
        self.port = 0

    def set_rate(self, namespace: str, service: str, requests_per_second: float | None) -> None:
        """None stops exporting the service's series: its metric goes missing."""
        with self._lock:
            if requests_per_second is None:
                self._rates.pop((namespace, service), None)
            else:
                self._rates[(namespace, service)] = requests_per_second

    def collect(self) -> Iterator[Metric]:
        pods = self._core.list_pod_for_all_namespaces(label_selector=SERVICE_LABEL).items
        replicas: dict[tuple[str, str], list[tuple[str, bool]]] = defaultdict(list)
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                serving = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
                replicas[(pod.metadata.namespace, pod.metadata.labels[SERVICE_LABEL])].append(
                    (pod.metadata.name, serving)
                )
        family = CounterMetricFamily("http_requests", "Requests served.", labels=["namespace", "pod"])
        with self._lock:
            now = time.monotonic()
            elapsed, self._last = now - self._last, now
            for (namespace, service), rate in self._rates.items():
                members = replicas.get((namespace, service), [])
                ready = [name for name, is_ready in members if is_ready]
                for name in ready:
                    self._served[(namespace, name)] += rate / len(ready) * elapsed
                for name, _ in members:
                    family.add_metric([namespace, name], self._served[(namespace, name)])
        yield family


@pytest.fixture(scope="module")
def load(api_client: client.ApiClient) -> Iterator[LoadExporter]:
    exporter = LoadExporter(client.CoreV1Api(api_client))
    registry = CollectorRegistry()
    registry.register(exporter)
    (port,) = free_ports(1)
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    exporter.port = port
    try:
        yield exporter
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def prometheus(load: LoadExporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: hack/install-tools.sh (apt-get install -y prometheus)")
    workdir = tmp_path_factory.mktemp("prometheus")
    scrape = {"job_name": "load", "static_configs": [{"targets": [f"127.0.0.1:{load.port}"]}]}
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]}))
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _ready(process, url, workdir), 60, "Prometheus to be ready")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(process: subprocess.Popen[bytes], url: str, workdir: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}")
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def autoscaling_operator(operator: OperatorProcess, prometheus: str) -> Iterator[OperatorProcess]:
    """The session's operator, restarted with the autoscaler reading this module's Prometheus."""
    saved = dict(operator.extra_env)
    operator.stop()
    operator.extra_env.update(
        {
            "AISCHED_AUTOSCALER__PROMETHEUS_URL": prometheus,
            "AISCHED_AUTOSCALER__INTERVAL_SECONDS": "1",
            "AISCHED_AUTOSCALER__RATE_WINDOW": RATE_WINDOW,
        }
    )
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        operator.extra_env.clear()
        operator.extra_env.update(saved)
        operator.start()


# -- helpers ---------------------------------------------------------------------


def aisvc(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return get_object(cluster, "inferenceservice", name, namespace)


def status_of(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = aisvc(cluster, namespace, name).get("status", {})
    return status


def replicas(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """Replica pods that are not on their way out."""
    pods = list_objects(cluster, "pods", namespace, f"{SERVICE_LABEL}={name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def wait_ready(cluster: LocalCluster, namespace: str, name: str, count: int, timeout: float = TIMEOUT) -> None:
    """Exactly COUNT replicas, all Ready, and the status saying so."""

    def settled() -> bool:
        pods = replicas(cluster, namespace, name)
        status = status_of(cluster, namespace, name)
        return (
            len(pods) == count
            and all(is_ready(p) for p in pods)
            and status.get("readyReplicas") == count
            and status.get("replicas") == count
        )

    try:
        wait_for(settled, timeout, f"{name} to run {count} ready replica(s)")
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{situation(cluster, namespace, name)}") from None


def situation(cluster: LocalCluster, namespace: str, name: str) -> str:
    """What a person would look at when a wait times out."""
    pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
    conditions = [
        (p["metadata"]["name"], [(c["type"], c["status"], c.get("reason")) for c in p["status"].get("conditions", [])])
        for p in list_objects(cluster, "pods", namespace)
    ]
    events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout
    return f"status: {status_of(cluster, namespace, name)}\n{pods}\n{conditions}\n{events}"


def spec_replicas(cluster: LocalCluster, namespace: str, name: str) -> int:
    value: int = aisvc(cluster, namespace, name)["spec"]["replicas"]
    return value


def ready_endpoints(cluster: LocalCluster, namespace: str, name: str) -> set[str]:
    slices = list_objects(cluster, "endpointslices", namespace, f"kubernetes.io/service-name={name}")
    return {
        endpoint["targetRef"]["name"]
        for s in slices
        for endpoint in s.get("endpoints") or []
        if endpoint.get("conditions", {}).get("ready")
    }


def event_reasons(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    events = list_objects(cluster, "events", namespace)
    return [e["reason"] for e in events if e["involvedObject"]["name"] == name]


def autoscaled(name: str, **autoscaling: Any) -> InferenceServiceBuilder:
    spec = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "metric": {"type": "RequestsPerSecond", "targetPerReplica": 10},
        "scaleUpStabilizationSeconds": 0,
        "scaleDownStabilizationSeconds": 0,
        "maxScaleUpReplicasPerMinute": 4,
        "maxScaleDownReplicasPerMinute": 4,
        **autoscaling,
    }
    return an_inference_service(name).set("autoscaling", spec)


# -- serving -------------------------------------------------------------------


def test_replicas_are_pinned_spread_and_only_ready_ones_get_traffic(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, an_inference_service("web").replicas(2).set("port", 8000).obj())
    wait_ready(cluster, namespace, "web", 2)
    pods = replicas(cluster, namespace, "web")
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] == p["spec"]["nodeName"] for p in pods)
    zones = {get_object(cluster, "node", n, "")["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}
    assert len(zones) == 2, f"two replicas should be in two zones, got {nodes}"
    status = status_of(cluster, namespace, "web")
    assert (status["phase"], status["onDemandReplicas"], status["spotReplicas"]) == ("Running", 2, 0)
    assert status["observedGeneration"] == aisvc(cluster, namespace, "web")["metadata"]["generation"]
    assert status["selector"] == f"aisched.io/kind=InferenceService,{SERVICE_LABEL}=web"
    service = get_object(cluster, "service", "web", namespace)
    assert service["spec"]["type"] == "ClusterIP"
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8000, 8000)]
    names = {p["metadata"]["name"] for p in pods}
    wait_for(lambda: ready_endpoints(cluster, namespace, "web") == names, TIMEOUT, "both replicas behind the Service")

    # A replica whose readiness probe fails leaves the Service, and the status counts it out.
    failing = sorted(names)[0]
    patch = '{"status":{"conditions":[{"type":"Ready","status":"False","reason":"ProbeFailed"}]}}'
    result = cluster.kubectl("patch", "pod", failing, "-n", namespace, "--subresource=status", "-p", patch)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: ready_endpoints(cluster, namespace, "web") == names - {failing}, TIMEOUT, "traffic to stop")
    wait_for(lambda: status_of(cluster, namespace, "web").get("readyReplicas") == 1, TIMEOUT, "readyReplicas 1")


def test_a_service_someone_else_made_under_the_name_is_left_as_it_was(cluster: LocalCluster, namespace: str) -> None:
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "taken"},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
    }
    apply(cluster, namespace, theirs)
    before = get_object(cluster, "service", "taken", namespace)
    apply(cluster, namespace, an_inference_service("taken").replicas(1).set("port", 8000).obj())

    def exposed() -> dict[str, Any] | None:
        conditions = status_of(cluster, namespace, "taken").get("conditions", [])
        return next((c for c in conditions if c["type"] == "ServiceExposed"), None)

    condition = wait_for(exposed, TIMEOUT, "the ServiceExposed condition")
    assert (condition["status"], condition["reason"]) == ("False", "ServiceNotOwned"), condition
    after = get_object(cluster, "service", "taken", namespace)
    assert after["spec"] == before["spec"]
    assert after["metadata"].get("ownerReferences") is None  # not adopted: deleting the model keeps it
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_kubectl_scale_drives_replicas_when_the_autoscaler_is_off(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, an_inference_service("manual").replicas(1).obj())
    wait_ready(cluster, namespace, "manual", 1)
    result = cluster.kubectl("scale", "aisvc", "manual", "-n", namespace, "--replicas=3")
    assert result.returncode == 0, result.stderr
    wait_ready(cluster, namespace, "manual", 3)
    status = status_of(cluster, namespace, "manual")
    assert status["desiredReplicas"] == 3
    scaling = next(c for c in status["conditions"] if c["type"] == "ScalingActive")
    assert (scaling["status"], scaling["reason"]) == ("False", "AutoscalingDisabled")
    assert cluster.kubectl("scale", "aisvc", "manual", "-n", namespace, "--replicas=1").returncode == 0
    wait_ready(cluster, namespace, "manual", 1)
    assert spec_replicas(cluster, namespace, "manual") == 1


def test_a_template_change_rolls_out_without_dropping_below_the_minimum(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, an_inference_service("roll").replicas(2).set("rollout", {"maxSurge": 1}).obj())
    wait_ready(cluster, namespace, "roll", 2)
    first = {p["metadata"]["labels"][TEMPLATE_HASH] for p in replicas(cluster, namespace, "roll")}
    patch = '{"spec":{"template":{"metadata":{"labels":{"version":"v2"}}}}}'
    assert cluster.kubectl("patch", "aisvc", "roll", "-n", namespace, "--type=merge", "-p", patch).returncode == 0
    fewest_ready, most = 2, 2
    deadline = time.monotonic() + TIMEOUT
    while True:
        pods = replicas(cluster, namespace, "roll")
        fewest_ready = min(fewest_ready, sum(is_ready(p) for p in pods))
        most = max(most, len(pods))
        hashes = {p["metadata"]["labels"][TEMPLATE_HASH] for p in pods}
        if len(pods) == 2 and all(is_ready(p) for p in pods) and not hashes & first:
            break
        assert time.monotonic() < deadline, f"rollout stuck: {[(p['metadata']['name'], is_ready(p)) for p in pods]}"
        time.sleep(0.2)
    assert fewest_ready >= 2, "maxUnavailable 0: never fewer than 2 ready replicas"
    assert most <= 3, "maxSurge 1: never more than 3 replicas"
    assert all(p["metadata"]["labels"]["version"] == "v2" for p in replicas(cluster, namespace, "roll"))
    wait_for(lambda: status_of(cluster, namespace, "roll").get("phase") == "Running", TIMEOUT, "rollout complete")


def test_a_spot_interruption_gets_the_replica_replaced_before_the_notice_runs_out(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    spot = {"policy": "Prefer", "minOnDemandReplicas": 1}
    apply(cluster, namespace, an_inference_service("spotty").replicas(2).set("spot", spot).obj())
    wait_ready(cluster, namespace, "spotty", 2)
    status = status_of(cluster, namespace, "spotty")
    assert (status["onDemandReplicas"], status["spotReplicas"]) == (1, 1)
    (victim,) = [
        p
        for p in replicas(cluster, namespace, "spotty")
        if p["metadata"]["labels"]["aisched.io/capacity-type"] == "Spot"
    ]
    doomed_node = victim["spec"]["nodeName"]
    notice_started = time.monotonic()
    taint_for_interruption(api_client, doomed_node, "aws")
    try:
        fewest_ready = 2
        while True:
            pods = replicas(cluster, namespace, "spotty")
            fewest_ready = min(fewest_ready, sum(is_ready(p) for p in pods))
            names = {p["metadata"]["name"] for p in pods}
            if victim["metadata"]["name"] not in names and len(pods) == 2 and all(is_ready(p) for p in pods):
                break
            assert time.monotonic() - notice_started < TIMEOUT, f"not replaced: {sorted(names)}"
            time.sleep(0.2)
        replaced_after = time.monotonic() - notice_started
        assert replaced_after < 120, "the AWS notice is 2 minutes"
        assert fewest_ready >= 2, "the replacement must be ready before the interrupted replica goes"
        assert doomed_node not in {p["spec"]["nodeName"] for p in replicas(cluster, namespace, "spotty")}
        assert "ReplacingInterrupted" in event_reasons(cluster, namespace, "spotty")
    finally:
        cluster.kubectl("taint", "node", doomed_node, "aws-node-termination-handler/spot-itn-")
        cluster.kubectl("uncordon", doomed_node)


# -- autoscaling -------------------------------------------------------------------


def test_a_load_step_scales_up_and_back_down_after_the_stabilisation_window(
    cluster: LocalCluster, namespace: str, load: LoadExporter
) -> None:
    window = 10
    load.set_rate(namespace, "chat", 0.0)
    apply(cluster, namespace, autoscaled("chat", scaleDownStabilizationSeconds=window).obj())
    wait_ready(cluster, namespace, "chat", 1)

    # 2.5 replicas' worth at 10 per replica: 3, with room for rate() to overshoot without asking for 4.
    load.set_rate(namespace, "chat", 25.0)
    wait_ready(cluster, namespace, "chat", 3, timeout=30)
    status = status_of(cluster, namespace, "chat")
    assert status["lastScaling"]["toReplicas"] == 3
    assert status["lastScaling"]["reason"].startswith("ScaleUp")
    assert status["desiredReplicas"] == 3
    assert "ScaleUp" in event_reasons(cluster, namespace, "chat")

    load.set_rate(namespace, "chat", 0.0)
    dropped = time.monotonic()
    wait_for(lambda: spec_replicas(cluster, namespace, "chat") < 3, TIMEOUT, "scale down")
    # The rate falls within a second or two, and with it the recommendation; the law must still wait out
    # its window since the last recommendation of 3, which may predate the drop by an evaluation and a scrape.
    assert time.monotonic() - dropped >= window - EVALUATION_SLACK
    wait_ready(cluster, namespace, "chat", 1)
    assert status_of(cluster, namespace, "chat")["lastScaling"]["toReplicas"] == 1


def test_a_missing_metric_holds_the_replica_count(cluster: LocalCluster, namespace: str, load: LoadExporter) -> None:
    load.set_rate(namespace, "quiet", None)
    apply(cluster, namespace, autoscaled("quiet").replicas(3).obj())
    wait_ready(cluster, namespace, "quiet", 3)
    wait_for(
        lambda: any(
            c["type"] == "ScalingActive" and c["reason"] == "MetricUnavailable"
            for c in status_of(cluster, namespace, "quiet").get("conditions", [])
        ),
        TIMEOUT,
        "the autoscaler to report the missing metric",
    )
    held_since = time.monotonic()
    while time.monotonic() - held_since < 6:  # six evaluations with no metric
        assert spec_replicas(cluster, namespace, "quiet") == 3
        time.sleep(0.5)
    assert "MetricUnavailable" in event_reasons(cluster, namespace, "quiet")

    load.set_rate(namespace, "quiet", 0.0)  # idle, and now measured: the law may act again
    wait_ready(cluster, namespace, "quiet", 1)
