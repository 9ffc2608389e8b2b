"""Checkpointer in real processes: a worker stopped by SIGTERM saves, reports (stamped with the real
time, no wall clock being given) and exits in time; the example stopped and resumed ends as a
straight run does. Real processes, so here rather than in the unit tier (tests/unit/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aisched.workload import CHECKPOINTED_EXIT_CODE, ResumePoint, WorkerEnvironment, parse_checkpoint_report

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "train_with_checkpoints.py"
# How long a stopped worker may take to save and exit: far more than it needs,
# far less than a spot notice.
EXIT_DEADLINE_S = 10.0


CHILD = textwrap.dedent(
    """
    import sys, time
    from aisched.workload import Checkpointer

    saved_to = sys.argv[1]

    def save(step):
        with open(saved_to, "w") as out:
            out.write(str(step))
        return saved_to

    checkpointer = Checkpointer(save, interval_seconds=3600)
    checkpointer.install_sigterm_handler()
    step = 0
    while True:
        time.sleep(0.005)  # one training step
        step += 1
        checkpointer.maybe_checkpoint(step)
        if step == 3:
            print("training", flush=True)
    """
)


def _child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AISCHED_")}
    env["AISCHED_TERMINATION_MESSAGE_PATH"] = str(tmp_path / "termination-log")
    env.update(extra)
    return env


def _wait_for_line(process: subprocess.Popen[str], text: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:  # bounded by the test's timeout marker
        if text in line:
            return
    raise AssertionError(f"the child ended without printing {text!r}: exit {process.wait()}")


@pytest.mark.timeout(60)
def test_a_real_worker_saves_reports_and_exits_in_time_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    saved_to = tmp_path / "state"
    with subprocess.Popen(
        [sys.executable, str(script), str(saved_to)],
        env=_child_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        _wait_for_line(child, "training")
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=EXIT_DEADLINE_S)
    assert code == CHECKPOINTED_EXIT_CODE
    # A real worker stamps its report with the real time.
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=datetime.now(UTC))
    assert report is not None
    assert report.path == str(saved_to)
    assert report.step == int(saved_to.read_text()) >= 3


def _run_example(tmp_path: Path, steps: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--steps", str(steps), "--step-seconds", "0.002"],
        env=_child_env(tmp_path, AISCHED_CHECKPOINT_DIR=str(tmp_path / "ckpt"), **env),
        stdout=subprocess.PIPE,
        text=True,
    )


def _final_weights(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("done:")).split(" saved to ")[0]


@pytest.mark.timeout(120)
def test_the_example_stopped_and_resumed_ends_where_an_uninterrupted_run_does(tmp_path: Path) -> None:
    steps = 400
    with _run_example(tmp_path / "straight", steps) as straight:
        out, _ = straight.communicate(timeout=60)
    assert straight.returncode == 0
    expected = _final_weights(out)

    interrupted = tmp_path / "interrupted"
    with _run_example(interrupted, steps, AISCHED_CHECKPOINT_INTERVAL_SECONDS="3600") as first:
        _wait_for_line(first, "step 100:")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=EXIT_DEADLINE_S) == CHECKPOINTED_EXIT_CODE
    report = parse_checkpoint_report((interrupted / "termination-log").read_text(), now=datetime.now(UTC))
    assert report is not None
    assert report.path is not None
    assert 100 <= report.step < steps - 1

    resume = WorkerEnvironment(resume=ResumePoint(report.step, report.path), gang_generation=1).to_env()
    with _run_example(interrupted, steps, **resume) as second:
        out, _ = second.communicate(timeout=60)
    assert second.returncode == 0
    assert f"resuming after step {report.step} (gang generation 1)" in out
    assert _final_weights(out) == expected
