"""KubeClient's guards: a write after the leader lease is lost is never sent; every request has a deadline,
is rate-limited, and is retried on 429 and 5xx (against a local HTTP server standing in for the API server)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest.mock import MagicMock

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aisched.kube.client import KubeClient, NotLeadingError, api_retries

pytestmark = [pytest.mark.asyncio, pytest.mark.loopback]  # a server on 127.0.0.1 (tests/unit/conftest.py)


def a_client(fence: Any = None) -> tuple[KubeClient, MagicMock]:
    kube = KubeClient(client.ApiClient(), request_timeout_seconds=7.0, fence=fence)
    core = MagicMock(spec=client.CoreV1Api)
    kube.core = core
    return kube, core


async def test_a_write_without_the_lease_is_refused_before_it_is_sent() -> None:
    kube, core = a_client(fence=lambda: False)
    core.delete_namespaced_pod.side_effect = AssertionError("must not be called")
    with pytest.raises(NotLeadingError):
        await kube.delete_pod("team", "a-g1-w0")
    core.delete_namespaced_pod.assert_not_called()


async def test_writes_and_reads_carry_the_request_deadline() -> None:
    kube, core = a_client(fence=lambda: True)
    await kube.delete_pod("team", "a-g1-w0")
    assert core.delete_namespaced_pod.call_args.kwargs["_request_timeout"] == 7.0
    core.list_node.return_value.data = b'{"items": []}'
    assert (await kube.list_nodes(dict, page_size=500)).items == []
    assert core.list_node.call_args.kwargs["_request_timeout"] == 7.0


@pytest.mark.looptime
async def test_requests_are_rate_limited_after_the_burst() -> None:
    kube = KubeClient(client.ApiClient(), qps=2.0, burst=3)
    kube.core = MagicMock(spec=client.CoreV1Api)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(*(kube.delete_pod("team", f"p{i}") for i in range(7)))
    # Three at once, then two a second: the last of the four others goes out two seconds later.
    assert loop.time() - start == pytest.approx(2.0)
    assert kube.core.delete_namespaced_pod.call_count == 7


class ApiServerDouble:
    """A local HTTP server answering GET /api/v1/nodes with the statuses scripted, then an empty list;
    or never answering at all (`hang`)."""

    def __init__(self, statuses: list[int], *, hang: bool = False) -> None:
        self.asked = 0
        self.released = threading.Event()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                double.asked += 1
                if hang:
                    double.released.wait()
                    return
                status = statuses.pop(0) if statuses else 200
                body = b'{"items": []}' if status == 200 else b'{"kind": "Status", "code": %d}' % status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def kube(self, request_timeout_seconds: float = 5.0) -> KubeClient:
        configuration = client.Configuration(host=f"http://127.0.0.1:{self._http.server_address[1]}")
        configuration.retries = api_retries()
        return KubeClient(client.ApiClient(configuration), request_timeout_seconds=request_timeout_seconds)

    def stop(self) -> None:
        self.released.set()
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def servers() -> Iterator[list[ApiServerDouble]]:
    made: list[ApiServerDouble] = []
    yield made
    for server in made:
        server.stop()


async def test_429_and_5xx_from_the_api_server_are_retried(servers: list[ApiServerDouble]) -> None:
    server = ApiServerDouble([429, 503, 500])
    servers.append(server)
    assert (await server.kube().list_nodes(dict, page_size=500)).items == []
    assert server.asked == 4


async def test_an_api_server_that_keeps_failing_is_an_error_after_a_few_tries(servers: list[ApiServerDouble]) -> None:
    server = ApiServerDouble([503] * 10)
    servers.append(server)
    with pytest.raises(ApiException) as raised:
        await server.kube().list_nodes(dict, page_size=500)
    assert raised.value.status == 503
    assert server.asked == 4


async def test_a_hung_api_server_costs_one_request_deadline(servers: list[ApiServerDouble]) -> None:
    server = ApiServerDouble([], hang=True)
    servers.append(server)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as raised:
        await server.kube(request_timeout_seconds=0.3).list_nodes(dict, page_size=500)
    assert isinstance(raised.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert loop.time() - start < 1.0  # not retried: a timeout would only multiply
    assert server.asked == 1
