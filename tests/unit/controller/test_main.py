from __future__ import annotations

import socket

from aisched.controller.main import replica_identity


def test_replicas_on_one_host_hold_the_lease_under_different_names() -> None:
    # Two operator processes on one machine (or pods on host networking) share a host name;
    # the same identity in the Lease let both believe they led.
    first, second = replica_identity(), replica_identity()
    assert first != second
    assert first.startswith(f"{socket.gethostname()}_") and second.startswith(f"{socket.gethostname()}_")
