"""The operator with outside sources that never answer: it still acts on a spot notice in time.

The session operator is restarted with its carbon source (National Grid's API) pointed at a
local server that accepts every request and never answers, and its DCGM Prometheus at one that
drips its answer a byte at a time (passing every per-read timeout). A deferrable job still
starts in time, and a spot notice still stops the gang on the doomed node within a few passes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import (
    INTERRUPTION_TAINTS,
    LocalCluster,
    apply,
    job,
    running_pods,
    taint_for_interruption,
    wait_for,
    wait_phase,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration]
# The notice must be acted on well inside the warning a spot node gives (30 s on GCP and Azure).
NOTICE_BOUND_S = 20


class BadServer:
    """A local HTTP server that hangs (never answers) or drips (a byte every half second)."""

    def __init__(self, drip: bool) -> None:
        self.released = threading.Event()
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.requests += 1
                if not drip:
                    server.released.wait()
                    return
                body = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for index in range(len(body)):
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                        if server.released.wait(0.5):
                            return
                except OSError:
                    return

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.released.set()
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture(scope="module")
def faulty_sources(operator: OperatorProcess) -> Iterator[tuple[BadServer, BadServer]]:
    hanging, dripping = BadServer(drip=False), BadServer(drip=True)
    saved = dict(operator.extra_env)
    operator.stop()
    operator.extra_env.update(
        {
            "AISCHED_CARBON__PROVIDER": "nationalgrid",
            "AISCHED_CARBON__NATIONALGRID_URL": hanging.url,
            "AISCHED_CARBON__DCGM_PROMETHEUS_URL": dripping.url,
        }
    )
    operator.start()
    try:
        yield hanging, dripping
    finally:
        operator.stop()
        operator.extra_env.clear()
        operator.extra_env.update(saved)
        hanging.stop()
        dripping.stop()
        operator.start()


def test_a_spot_notice_is_acted_on_in_time_while_the_outside_sources_hang(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, faulty_sources: tuple[BadServer, BadServer]
) -> None:
    hanging, _ = faulty_sources
    deferrable = (
        a_training_job("green")
        .set("expectedDurationSeconds", 600)
        .set("carbon", {"deferrable": True, "maxDelaySeconds": 3600})
        .obj()
    )
    apply(cluster, namespace, deferrable)
    apply(cluster, namespace, a_training_job("spotty").replicas(2).gpus(2).spot("Only").obj())
    # Without a forecast (the source hangs) a deferrable job starts in time rather than wait on it.
    wait_phase(cluster, namespace, "green", "Running")
    before = wait_phase(cluster, namespace, "spotty", "Running")["status"]
    assert hanging.requests > 0, "the operator never asked the hanging carbon source"

    nodes = sorted(before["placement"]["nodes"])
    pods = {p["metadata"]["name"] for p in running_pods(cluster, namespace, "spotty")}
    key, _ = INTERRUPTION_TAINTS["aws"]
    try:
        noticed = time.monotonic()
        taint_for_interruption(api_client, nodes[0], "aws")

        def gang_stopped() -> bool:
            status: dict[str, Any] = job(cluster, namespace, "spotty").get("status", {})
            left = {p["metadata"]["name"] for p in running_pods(cluster, namespace, "spotty")}
            return bool(status.get("interruptions")) or not pods <= left

        wait_for(gang_stopped, NOTICE_BOUND_S, "the operator to act on the spot notice")
        took = time.monotonic() - noticed
    finally:
        for node in nodes:
            cluster.kubectl("taint", "node", node, f"{key}-")
            cluster.kubectl("uncordon", node)
    assert took < NOTICE_BOUND_S
