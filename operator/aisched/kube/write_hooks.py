"""Tests only: a hook the client calls before each write (`KubeClient.before_write`).

Off unless the `test_exit_at_write` setting names a namespace and a count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


def write_killer(spec: str) -> Callable[[Callable[..., Any], tuple[Any, ...]], None]:
    """Tests only: SPEC 'NAMESPACE:N' ends the process just before its Nth write in NAMESPACE.

    Kill-at-each-write tests run the operator with every N in turn and check that, restarted,
    it converges as if nothing happened. Events are left out: they go out beside the loop, in
    no fixed order. `os._exit`: no cleanup, no flush, as when the node dies.
    """
    namespace, _, count = spec.rpartition(":")
    target, seen = int(count), 0
    lock = threading.Lock()

    def before_write(method: Callable[..., Any], args: tuple[Any, ...]) -> None:
        nonlocal seen
        if namespace not in args or getattr(method, "__name__", "") == "create_namespaced_event":
            return
        with lock:
            seen += 1
            reached = seen == target
        # Straight to the descriptor: logging.shutdown() could wait on a handler lock another
        # thread holds (it hung once), and every later write would wait on ours. Each write is
        # named, so a path that does not converge shows which writes came before the kill.
        name = getattr(method, "__name__", method)
        objects = " ".join(str(a) for a in args if isinstance(a, str) and a != namespace)
        os.write(2, f"test hook: write {seen} in {namespace}: {name} {objects}\n".encode())
        if reached:
            os.write(2, f"test hook: exiting before write {target} in {namespace} ({name})\n".encode())
            os._exit(137)

    return before_write
