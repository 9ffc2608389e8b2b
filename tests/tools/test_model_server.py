"""The InferenceService example's server (manifests/examples/model-server) in a real process.

What the operator and the readinessProbe read (/health only once loaded; the request counter and
in-flight gauge the built-in autoscaling queries name) and what a client may send it (bounded,
checked bodies answered with 4xx, never a traceback); SIGTERM ends it cleanly.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisched.sources.prometheus import MetricNames

SERVER = Path(__file__).parents[2] / "manifests" / "examples" / "model-server" / "server.py"
START_DEADLINE_S = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", str(port), "--load-seconds", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        try:
            _request(port, "GET", "/metrics")
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = _request(port, "GET", "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_ready_once_loaded_answers_and_counts_what_the_autoscaler_reads(
    server: tuple[subprocess.Popen[str], int],
) -> None:
    _, port = server
    assert _request(port, "GET", "/health")[0] == 503  # still loading: not Ready
    deadline = time.monotonic() + START_DEADLINE_S
    while _request(port, "GET", "/health")[0] != 200:
        assert time.monotonic() < deadline, "never became ready"
        time.sleep(0.05)

    status, body = _request(port, "POST", "/v1/completions", json.dumps({"prompt": "a b c", "max_tokens": 2}).encode())

    assert status == 200
    assert json.loads(body)["choices"][0]["text"] == "c b"
    names = MetricNames()
    samples = _samples(port)
    assert samples[(names.request_counter, (("code", "200"), ("path", "/v1/completions")))] == 1.0
    assert samples[(names.concurrency_gauge, ())] == 0.0


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not json", 400),
        (b"[1, 2]", 400),
        (json.dumps({"prompt": 3}).encode(), 400),
        (json.dumps({"prompt": "a", "max_tokens": 10_000}).encode(), 400),
        (json.dumps({"prompt": "a", "max_tokens": True}).encode(), 400),
        (b"x" * (64 * 1024 + 1), 413),
    ],
)
def test_a_bad_request_gets_a_client_error_and_the_server_goes_on(
    server: tuple[subprocess.Popen[str], int], body: bytes, status: int
) -> None:
    process, port = server
    assert _request(port, "POST", "/v1/completions", body)[0] == status
    assert process.poll() is None
    assert _request(port, "GET", "/nowhere")[0] == 404


def test_sigterm_stops_it_cleanly(server: tuple[subprocess.Popen[str], int]) -> None:
    process, _ = server
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert process.stdout is not None
    assert "Traceback" not in process.stdout.read()
