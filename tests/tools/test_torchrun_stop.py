"""torchrun, configured only by the environment the operator gives a pod, lets its workers finish a slow save.

A pod's PET_* variables (from the real builder) start a two-process torchrun; SIGTERM to
torchrun, as the kubelet sends it, reaches both workers, which agree on a step and save it
for longer than torchrun's default 30 s before SIGKILL: PET_SHUTDOWN_TIMEOUT keeps them alive.
Skipped where torch is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aisched.api import TrainingJob
from aisched.kube.builders import GangLaunch, WorkerSlot, build_worker_pod
from aisched.workload import parse_checkpoint_report
from tests.builders import a_training_job
from tests.paths import REPO_ROOT

# The operator reads the reports later than they were written, whatever clock wrote them.
READ_AT = datetime(2100, 1, 1, tzinfo=UTC)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

SAVE_SECONDS = 33  # past torchrun's default shutdown timeout (30 s)
GRACE_SECONDS = 90  # the pod's grace, which the builder passes on to torchrun
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = GRACE_SECONDS + 30


def _pod_environment() -> dict[str, str]:
    obj = a_training_job("ddp").replicas(1).gpus(2).namespace("team").obj()
    obj["metadata"]["uid"] = "uid-1"
    launch = GangLaunch(
        generation=0,
        world_size=1,
        slots=(WorkerSlot(0, "n1"),),
        termination_grace_seconds=GRACE_SECONDS,
        stop_grace_seconds=GRACE_SECONDS,
    )
    pod = build_worker_pod(TrainingJob.model_validate(obj), launch, launch.slots[0])
    return {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_sigterm_to_torchrun_lets_both_workers_save_past_thirty_seconds(tmp_path: Path) -> None:
    pod_env = _pod_environment()
    assert (pod_env["PET_NPROC_PER_NODE"], pod_env["PET_SHUTDOWN_TIMEOUT"]) == ("2", str(GRACE_SECONDS))
    env = {
        **os.environ,
        **pod_env,
        "PET_MASTER_PORT": str(_free_port()),  # 29500 may be taken on a shared machine
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "operator"), str(REPO_ROOT)]),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "-m", "tests.tools.torchrun_worker"]
    torchrun = subprocess.Popen(
        [*command, str(tmp_path), str(SAVE_SECONDS)], cwd=REPO_ROOT, env=env, start_new_session=True
    )
    try:
        _wait_for(lambda: all((tmp_path / f"ready-{r}").exists() for r in range(2)), START_TIMEOUT_S, "training")
        signalled = time.monotonic()
        torchrun.send_signal(signal.SIGTERM)
        torchrun.wait(STOP_TIMEOUT_S)
        stopped_after = time.monotonic() - signalled
    finally:
        if torchrun.poll() is None:
            os.killpg(torchrun.pid, signal.SIGKILL)
    written = [tmp_path / f"report-{r}" for r in range(2)]
    # No report: torchrun killed the workers in the middle of the save.
    reports = [parse_checkpoint_report(path.read_text(), now=READ_AT) if path.exists() else None for path in written]
    assert None not in reports, f"a worker saved nothing ({stopped_after:.0f}s after SIGTERM)"
    steps = {report.step for report in reports if report is not None}
    assert len(steps) == 1  # both saved, the same step
    (step,) = steps
    assert (tmp_path / "ckpt" / f"step-{step:09d}" / ".metadata").is_file()
    assert stopped_after > SAVE_SECONDS  # the save really outlived torchrun's default kill delay
