from __future__ import annotations

import asyncio
import socket
import weakref
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.structs.bodies import RawEvent
from kopf._cogs.structs.references import Resource
from kopf._core.reactor import queueing

from aisched.api import GROUP, VERSION
from aisched.controller.main import WORKER_IDLE_SECONDS, Heartbeat, _configure_kopf, replica_identity


def test_replicas_on_one_host_hold_the_lease_under_different_names() -> None:
    # Two operator processes on one machine (or pods on host networking) share a host name;
    # the same identity in the Lease let both believe they led.
    first, second = replica_identity(), replica_identity()
    assert first != second
    assert first.startswith(f"{socket.gethostname()}_") and second.startswith(f"{socket.gethostname()}_")


def test_liveness_fails_when_the_reconcile_loop_completes_no_pass_within_the_bound() -> None:
    now = [1000.0]
    heartbeat = Heartbeat(pass_bound_seconds=300, clock=lambda: now[0])
    now[0] += 400
    heartbeat.last = now[0]  # the event loop ticks...
    assert heartbeat.healthy()  # ...and a standby, whose controllers never started, runs no passes
    heartbeat.pass_completed()  # the controllers start
    now[0] += 299
    heartbeat.last = now[0]
    assert heartbeat.healthy()
    now[0] += 2
    heartbeat.last = now[0]
    assert not heartbeat.healthy()  # ticking, but stuck inside a pass
    heartbeat.pass_completed()
    assert heartbeat.healthy()
    now[0] += 61
    assert not heartbeat.healthy()  # the event loop itself stopped ticking


class _Body(dict[str, Any]):
    """An object's body that a weak reference can follow (a plain dict cannot be)."""


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_kopfs_worker_for_an_object_lets_go_of_its_body_once_it_is_handled() -> None:
    # A restart's first list hands kopf every TrainingJob within seconds, each up to 20 MiB
    # parsed; with kopf's default (5 s) its worker held each body that long after the handler
    # ran, and the operator held them all at once (848 MiB for 48 of the largest).
    settings = kopf.OperatorSettings()
    _configure_kopf(settings, page_size=500)
    body = _Body(metadata={"uid": "u1", "name": "big"})
    body_alive = weakref.ref(body)
    handled: list[str] = []

    async def processor(*, raw_event: RawEvent, **_: Any) -> str | None:
        handled.append(raw_event["object"]["metadata"]["name"])
        return None  # patched nothing

    key = (Resource(GROUP, VERSION, "trainingjobs"), queueing.ObjectUid("u1"))
    streams = {key: queueing.Stream(backlog=asyncio.Queue(), pressure=asyncio.Event())}
    await streams[key].backlog.put(cast(RawEvent, {"type": None, "object": body}))
    del body
    worker = asyncio.create_task(
        queueing.worker(signaller=asyncio.Condition(), settings=settings, processor=processor, streams=streams, key=key)
    )
    await asyncio.sleep(WORKER_IDLE_SECONDS * 2)  # the loop's fake clock
    assert handled == ["big"]
    assert worker.done() and key not in streams
    assert body_alive() is None
