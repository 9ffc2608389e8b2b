"""Tests only: a hook the client calls before each write (`KubeClient.before_write`).

Off unless the `test_exit_at_write` setting names a namespace and a count, or a test that runs
the operator in its own process arms it (tests/integration/in_process.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, NoReturn


def _exit_now() -> NoReturn:
    # `os._exit`: no cleanup, no flush, as when the node dies.
    os._exit(137)


def _to_stderr(line: str) -> None:
    # Straight to the descriptor: logging.shutdown() could wait on a handler lock another
    # thread holds (it hung once), and every later write would wait on ours.
    os.write(2, f"{line}\n".encode())


def write_killer(
    spec: str, *, end: Callable[[], NoReturn] = _exit_now, say: Callable[[str], None] = _to_stderr
) -> Callable[[Callable[..., Any], tuple[Any, ...]], None]:
    """Tests only: SPEC 'NAMESPACE:N' ends the operator (END) just before its Nth write in NAMESPACE.

    Kill-at-each-write tests run the operator with every N in turn and check that, restarted,
    it converges as if nothing happened. Events are left out: they go out beside the loop, in
    no fixed order. Each write is named (SAY), so a path that does not converge shows which
    writes came before the kill.
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
        name = getattr(method, "__name__", method)
        objects = " ".join(str(a) for a in args if isinstance(a, str) and a != namespace)
        say(f"test hook: write {seen} in {namespace}: {name} {objects}")
        if reached:
            say(f"test hook: exiting before write {target} in {namespace} ({name})")
            end()

    return before_write
