"""The operator in the test process, against the test cluster: killed at a chosen write, rebuilt at once.

A kill here is what `os._exit` is to the process (kube/write_hooks.py): from the write it stops
at, no write of that operator reaches the API server, events included, and nothing it holds in
memory survives: the next one is built anew (controllers, caches, kopf, API client) and relists.
What it cannot model is a write cut halfway through its request, which the API server applies
whole or not at all either way; test_kill_at_write.py keeps one path across a real process kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

from kubernetes.client import ApiClient, CustomObjectsApi

from aisched.api import GROUP, VERSION
from aisched.controller.embedded import operate
from aisched.controller.training import TrainingJobController
from aisched.kube.client import load_api_client
from aisched.kube.write_hooks import write_killer
from aisched.settings import Settings
from aisched.testing.cluster import TIMEOUT, wait_for

log = logging.getLogger("aisched.testing.in_process")
# Seconds a stopped operator may take to wind down: kopf cancels its watches and workers at once,
# and the API threads' calls end on their own request timeout, which no wind-down waits for.
STOP_SECONDS = 60


class OperatorKilled(BaseException):  # an end, as SystemExit is, not an error to handle
    """Raised at and after the kill point, so no `except Exception` of the operator carries on."""


@dataclass
class InProcessOperator:
    kubeconfig: Path
    log_path: Path
    settings: dict[str, Any] = field(default_factory=dict)
    """Settings fields (as Settings(**settings) takes them) over those the environment gives."""
    clock_skew: timedelta = timedelta(0)
    """How far ahead of the wall clock the next operators' clock runs: a path whose trigger is a
    moment (a carbon chunk's end) is reached at once, rather than waited for at every kill point."""
    _thread: threading.Thread | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, repr=False)
    _stop_flag: asyncio.Event | None = field(default=None, repr=False)
    _dead: threading.Event = field(default_factory=threading.Event, repr=False)
    _failure: BaseException | None = field(default=None, repr=False)
    _jobs: TrainingJobController | None = field(default=None, repr=False)

    def start(self, armed_for: str | None = None, n: int = 0) -> None:
        """A new operator (the old one stopped first), armed to die before its Nth write in ARMED_FOR."""
        self.stop()
        settings = Settings(**self.settings)
        dead = self._dead = threading.Event()
        counting = write_killer(f"{armed_for}:{n}", end=self._die, say=log.warning) if armed_for else None

        def before_write(method: Callable[..., Any], args: tuple[Any, ...]) -> None:
            if dead.is_set():
                raise OperatorKilled
            if counting is not None:
                counting(method, args)

        api_client = load_api_client(self.kubeconfig)
        loop = self._loop = asyncio.new_event_loop()
        stop_flag = self._stop_flag = asyncio.Event()
        self._failure = None
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            task = self._task = loop.create_task(
                operate(settings, api_client, stop_flag=stop_flag, before_write=before_write, built=self._built)
            )
            ready.set()
            try:
                loop.run_until_complete(task)
            except (asyncio.CancelledError, OperatorKilled):
                pass
            except BaseException as error:  # told by stop(): the test must not pass on a broken operator
                self._failure = error
            finally:
                _wind_down(loop)
                api_client.close()
                api_client.rest_client.pool_manager.clear()  # close() leaves its connections open

        self._thread = threading.Thread(target=run, name="operator", daemon=True)
        self._thread.start()
        ready.wait()
        self._read_queues(api_client)

    def _built(self, jobs: TrainingJobController) -> None:
        self._jobs = jobs
        if self.clock_skew:
            jobs.clock = functools.partial(_skewed_now, self.clock_skew)

    def _read_queues(self, api_client: ApiClient) -> None:
        """Until the new operator has read every Queue there is: the relist it starts with reads
        jobs, nodes and pods, and its first cycle may come before its Queue watch, with a job of a
        Queue it has not read yet admitted there without that Queue's quota (seen once a restart
        took a second, not the ten of a new process: reported, not this test's to check)."""
        names = {
            q["metadata"]["name"]
            for q in CustomObjectsApi(api_client).list_cluster_custom_object(GROUP, VERSION, "queues")["items"]
        }

        def read() -> bool:
            if self._failure is None and self.ended():
                return True  # its kill point came first, as it may when its path is due at once
            if self._failure is not None or self._thread is None or not self._thread.is_alive():
                raise RuntimeError(f"the in-process operator ended while starting; log:\n{self.log_tail()}")
            return self._jobs is not None and names <= set(self._jobs.queues)

        wait_for(read, TIMEOUT, "the new operator to read every Queue")

    def _die(self) -> NoReturn:
        self._dead.set()
        self._wind_up()
        raise OperatorKilled

    def _wind_up(self) -> None:
        """kopf told to stop: it closes its watches and sessions (no write of ours goes out any more)."""
        loop, flag = self._loop, self._stop_flag
        if loop is not None and flag is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: it has stopped
                loop.call_soon_threadsafe(flag.set)

    def stop(self) -> None:
        """Stopped as killed: writes refused from now, kopf and its tasks ended, its thread gone."""
        self._dead.set()
        thread, loop, task = self._thread, self._loop, self._task
        if thread is None or loop is None or task is None:
            return
        self._wind_up()
        thread.join(STOP_SECONDS)
        if thread.is_alive():
            raise RuntimeError(f"the in-process operator did not stop within {STOP_SECONDS}s")
        self._thread = self._loop = self._task = self._stop_flag = self._jobs = None
        if self._failure is not None:
            raise RuntimeError(f"the in-process operator failed; log:\n{self.log_tail()}") from self._failure

    def ended(self) -> bool:
        """It reached its kill point."""
        return self._dead.is_set()

    @contextmanager
    def logging_to_file(self) -> Iterator[None]:
        """The operator's log lines (INFO and up, kopf's per-object ones aside) go to LOG_PATH meanwhile."""
        handler = logging.FileHandler(self.log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root, ours, objects = logging.getLogger(), logging.getLogger("aisched"), logging.getLogger("kopf.objects")
        levels = (ours.level, objects.level)
        root.addHandler(handler)
        ours.setLevel(logging.INFO)
        objects.setLevel(logging.WARNING)
        try:
            yield
        finally:
            root.removeHandler(handler)
            handler.close()
            ours.setLevel(levels[0])
            objects.setLevel(levels[1])

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _skewed_now(skew: timedelta) -> datetime:
    return datetime.now(UTC) + skew


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does after its main task, but waiting on no executor thread."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
