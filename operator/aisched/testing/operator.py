"""The operator as a real process against the local cluster, for integration tests and benchmarks.

It runs exactly as a user runs it (`aisched run`), so tests can kill it at any
moment and start it again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aisched.testing.cluster import REPO_ROOT, LocalCluster, free_ports, wait_for


@dataclass
class OperatorProcess:
    cluster: LocalCluster
    log_path: Path
    metrics_port: int = 0
    health_port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    extra_env: dict[str, str] = field(default_factory=dict)
    standalone: bool = True
    """False: the replica takes part in leader election and acts only while it holds the Lease."""

    def start(self) -> None:
        if not self.metrics_port:
            self.metrics_port, self.health_port = free_ports(2)
        env = {
            **self.cluster.env,
            "AISCHED_METRICS_PORT": str(self.metrics_port),
            "AISCHED_HEALTH_PORT": str(self.health_port),
            "AISCHED_RESYNC_SECONDS": "2",
            "AISCHED_LOG_LEVEL": "INFO",
            "AISCHED_TOPOLOGY__PRESET": "local",  # the local cluster labels racks aisched.io/rack
            # As the image sets it: `aisched run` need not start itself again with it (a second
            # import of everything, 1.5 s of each start).
            "PYTHONMALLOC": "malloc",
            **self.extra_env,
        }
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [sys.executable, "-m", "aisched.cli", "run", *(["--standalone"] if self.standalone else [])],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
            )
        wait_for(self._healthy, 60, "the operator's /healthz")

    def _healthy(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"the operator exited; log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies under the operator."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    @contextmanager
    def restarted_with(self, env: dict[str, str]) -> Iterator[OperatorProcess]:
        """The operator restarted with ENV added to its environment; as it was again afterwards."""
        saved = dict(self.extra_env)
        self.stop()
        self.extra_env.update(env)
        self.start()
        try:
            yield self
        finally:
            self.stop()
            self.extra_env.clear()
            self.extra_env.update(saved)
            self.start()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
