"""The unit tier is hermetic: a test here opens no socket, starts no process and reads no wall clock.

Each breach fails the test that made it, even where the code under test swallows the error
(it is recorded and checked after the test): time comes in as a parameter or a fake clock
(`clock=`, looptime), the API server as a double, a process as a function call. Tests that
need a real process belong to tests/tools or the integration tier.

One narrow allowance, `@pytest.mark.loopback`: the clients of outside HTTP services (the
carbon and Prometheus sources, the Kubernetes client's retries) are checked against a server
the test runs on 127.0.0.1, for what only a real transport shows (timeouts, a body that
trickles, a refused connection); such a test may open sockets, and connect to 127.0.0.1 only.

The wall clock is `time.time`/`time.time_ns` called from aisched's or the tests' own code
(libraries stamp their log records with it), and `datetime.now`/`utcnow`/`today` and
`date.today` through the names aisched's and the tests' modules import.
"""

from __future__ import annotations

import _posixsubprocess
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import pytest_socket

OURS = ("aisched.", "tests.")
LOOPBACK = ["127.0.0.1", "::1", "localhost"]


class Breaches:
    """What the running test did that a unit test must not (empty while no test runs)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.clock_allowed = True

    def refuse(self, what: str) -> None:
        self.seen.append(what)
        raise AssertionError(f"a unit test must not {what} (tests/unit/conftest.py)")


BREACHES = Breaches()


def _ours(frame_depth: int = 2) -> bool:
    return str(sys._getframe(frame_depth).f_globals.get("__name__", "")).startswith(OURS)


def _refusing_process(name: str) -> Callable[..., Any]:
    def refused(*_: Any, **__: Any) -> Any:
        BREACHES.refuse(f"start a process ({name})")

    return refused


def _wall(real: Callable[[], Any], name: str) -> Callable[[], Any]:
    def guarded() -> Any:
        if not BREACHES.clock_allowed and _ours():
            BREACHES.refuse(f"read the wall clock ({name})")
        return real()

    return guarded


class _Real(type):
    """The guarded classes stand for the real ones in isinstance and issubclass."""

    __real__: type

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.__real__)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls.__real__)


def _clock_read(what: str) -> None:
    if not BREACHES.clock_allowed:
        BREACHES.refuse(f"read the wall clock ({what})")


class GuardedDatetime(dt.datetime, metaclass=_Real):
    """`datetime` in our modules while a test runs: builds real datetimes, refuses the clock."""

    __real__ = dt.datetime

    def __new__(cls, *args: Any, **kwargs: Any) -> dt.datetime:  # type: ignore[misc]
        return dt.datetime(*args, **kwargs)

    @classmethod
    def now(cls, tz: Any = None) -> dt.datetime:  # type: ignore[override]
        _clock_read("datetime.now")
        return dt.datetime.now(tz)

    @classmethod
    def utcnow(cls) -> dt.datetime:  # type: ignore[override]
        _clock_read("datetime.utcnow")
        return dt.datetime.utcnow()

    @classmethod
    def today(cls) -> dt.datetime:  # type: ignore[override]
        _clock_read("datetime.today")
        return dt.datetime.today()


class GuardedDate(dt.date, metaclass=_Real):
    __real__ = dt.date

    def __new__(cls, *args: Any, **kwargs: Any) -> dt.date:  # type: ignore[misc]
        return dt.date(*args, **kwargs)

    @classmethod
    def today(cls) -> dt.date:  # type: ignore[override]
        _clock_read("date.today")
        return dt.date.today()


def _recording(init: Callable[..., None]) -> Callable[..., None]:
    def recorded(self: BaseException, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        BREACHES.seen.append(f"open a socket ({self})")

    return recorded


def _our_modules() -> list[ModuleType]:
    return [m for name, m in list(sys.modules.items()) if m is not None and (name + ".").startswith(OURS)]


@pytest.fixture(autouse=True, scope="session")
def _hermetic_session() -> Iterator[None]:
    """The guards, installed once; each test's fixture below arms them."""
    patch = pytest.MonkeyPatch()
    for module in (_posixsubprocess,):
        patch.setattr(module, "fork_exec", _refusing_process("subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        patch.setattr(os, name, _refusing_process(f"os.{name}"))
    patch.setattr(time, "time", _wall(time.time, "time.time"))
    patch.setattr(time, "time_ns", _wall(time.time_ns, "time.time_ns"))
    for module in _our_modules():
        if getattr(module, "datetime", None) is dt.datetime:
            patch.setattr(module, "datetime", GuardedDatetime)
        if getattr(module, "date", None) is dt.date:
            patch.setattr(module, "date", GuardedDate)
    # pytest-socket's refusals, recorded too: a client may turn them into an error it handles.
    for error in (pytest_socket.SocketBlockedError, pytest_socket.SocketConnectBlockedError):
        patch.setattr(error, "__init__", _recording(error.__init__))
    try:
        yield
    finally:
        patch.undo()


@pytest.fixture(autouse=True)
def _hermetic(request: pytest.FixtureRequest) -> Iterator[None]:
    loopback = request.node.get_closest_marker("loopback") is not None
    if loopback:
        pytest_socket.socket_allow_hosts(LOOPBACK, allow_unix_socket=True)
    else:
        pytest_socket.disable_socket(allow_unix_socket=True)  # asyncio's loops wake over a socketpair
    BREACHES.seen.clear()
    BREACHES.clock_allowed = False
    try:
        yield
    finally:
        BREACHES.clock_allowed = True
        pytest_socket.enable_socket()
        pytest_socket._remove_restrictions()
    assert not BREACHES.seen, f"this unit test is not hermetic: {BREACHES.seen}"
