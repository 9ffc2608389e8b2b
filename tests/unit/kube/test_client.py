"""KubeClient's guards: a write after the leader lease is lost is never sent; every request has a deadline."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import MagicMock

import pytest
from kubernetes import client

from aisched.kube.client import KubeClient, NotLeadingError

pytestmark = [pytest.mark.asyncio]


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
    assert await kube.list_nodes() == []
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
