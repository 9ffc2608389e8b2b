from __future__ import annotations

import socket

from aisched.controller.main import Heartbeat, replica_identity


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
