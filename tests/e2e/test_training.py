"""A real training job survives a spot interruption on a real node and ends as if nothing had happened.

The real kubelet delivers the operator's SIGTERM within the grace period the
operator chose; train.py (aisched.workload) saves, reports the step in its
termination message and exits 75; the operator records the checkpoint and
restarts the gang on the other real node with AISCHED_RESUME_STEP; the run
ends with exactly the weights of an uninterrupted run of the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from aisched.testing.cluster import LocalCluster, job, taint_for_interruption, wait_for
from tests.e2e.training import (
    CHECKPOINTED_EXIT_CODE,
    STEPS,
    PodHistory,
    apply,
    env_of,
    final_result,
    last_step,
    reference_run,
    running_workers,
    training_job,
)

# Enough steps trained before the notice that a resume from step 0 could not pass for one from the checkpoint.
STEPS_BEFORE_NOTICE = 100
RUN_TIMEOUT = 300


def interrupt_and_resume(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    *,
    replicas: int,
    interrupted: list[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Run NAME until it has trained a while, interrupt the node of its first worker, and wait for the resumed gang.

    Returns the stopped workers' terminations, the resumed workers (checked to be the next generation,
    resuming from the recorded step), and the step the job recorded.
    """
    with PodHistory(api_client, namespace) as history:
        first = wait_for(lambda: running_workers(cluster, namespace, name, replicas), RUN_TIMEOUT, "the gang running")
        old = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in first}
        generation = int(env_of(first[0])["AISCHED_GANG_GENERATION"])
        wait_for(
            lambda: all(last_step(cluster, namespace, pod) >= STEPS_BEFORE_NOTICE for pod in old),
            RUN_TIMEOUT,
            f"{STEPS_BEFORE_NOTICE} steps trained",
        )
        victim = first[0]["spec"]["nodeName"]
        interrupted.append(victim)
        taint_for_interruption(api_client, victim, "aws")

        def resumed() -> list[dict[str, Any]] | None:
            pods = running_workers(cluster, namespace, name, replicas)
            return pods if pods and not {p["metadata"]["name"] for p in pods} & set(old) else None

        new = wait_for(resumed, RUN_TIMEOUT, "the gang resumed")
        terminations = [t for pod in old for t in history.terminations(pod)]
        graces = {pod: history.deletion_grace(pod) for pod in old}
    recorded = job(cluster, namespace, name)["status"]["lastCheckpoint"]["step"]
    # The kubelet gave the workers the grace period the operator chose, within the AWS notice.
    assert all(grace is not None and 0 < grace <= 120 for grace in graces.values()), graces
    assert all(p["spec"]["nodeName"] != victim for p in new), "resumed on the interrupted node"
    assert_resumed_from(new, recorded, generation + 1)
    return terminations, new, recorded


def assert_saved_on_sigterm(terminations: list[dict[str, Any]], replicas: int, recorded: int) -> None:
    """Every worker saved on the SIGTERM and said so; the job records the oldest step, where all can resume."""
    assert len(terminations) == replicas, terminations
    steps = []
    for terminated in terminations:
        assert terminated["exitCode"] == CHECKPOINTED_EXIT_CODE, terminated
        report = json.loads(terminated["message"])
        assert report["path"].endswith(f"step-{report['step']:09d}.npz"), report
        steps.append(report["step"])
    assert min(steps) == recorded, (steps, recorded)


def assert_resumed_from(pods: list[dict[str, Any]], recorded: int, generation: int) -> None:
    """The next generation of the gang, told the step the job recorded."""
    for pod in pods:
        env = env_of(pod)
        assert env["AISCHED_RESUME_STEP"] == str(recorded), env
        assert env["AISCHED_GANG_GENERATION"] == str(generation), env


def wait_succeeded(cluster: LocalCluster, namespace: str, name: str) -> None:
    def done() -> bool:
        phase = job(cluster, namespace, name).get("status", {}).get("phase")
        assert phase != "Failed", job(cluster, namespace, name)["status"]
        return bool(phase == "Succeeded")

    wait_for(done, RUN_TIMEOUT, f"{name} to succeed", interval=1)


def test_interrupted_job_resumes_elsewhere_with_the_uninterrupted_weights(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    checkpoint_root: Path,
    interrupted: list[str],
) -> None:
    name = "solo"
    apply(cluster, training_job(name, namespace, checkpoint_root))
    terminations, resumed, recorded = interrupt_and_resume(
        cluster, api_client, namespace, name, replicas=1, interrupted=interrupted
    )
    assert STEPS_BEFORE_NOTICE <= recorded < STEPS - 1
    assert_saved_on_sigterm(terminations, 1, recorded)
    wait_succeeded(cluster, namespace, name)

    result = final_result(checkpoint_root / namespace / name / "rank-0")
    reference = reference_run(api_client, namespace, resumed[0]["spec"]["nodeName"], checkpoint_root, rank=0)
    assert result["resumedFrom"] == recorded
    assert result["weightsSha256"] == reference["weightsSha256"]
    assert result["loss"] == reference["loss"]


def test_gang_stops_checkpoints_and_resumes_together(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    checkpoint_root: Path,
    interrupted: list[str],
) -> None:
    name = "gang"
    apply(cluster, training_job(name, namespace, checkpoint_root, replicas=2))
    terminations, resumed, recorded = interrupt_and_resume(
        cluster, api_client, namespace, name, replicas=2, interrupted=interrupted
    )
    assert_saved_on_sigterm(terminations, 2, recorded)
    wait_succeeded(cluster, namespace, name)

    node = resumed[0]["spec"]["nodeName"]
    for rank in (0, 1):
        result = final_result(checkpoint_root / namespace / name / f"rank-{rank}")
        reference = reference_run(api_client, namespace, node, checkpoint_root, rank=rank)
        # Ranks that train independently may have saved a later step than the gang's (train.py).
        assert result["resumedFrom"] >= recorded
        assert result["weightsSha256"] == reference["weightsSha256"], f"rank {rank}"
