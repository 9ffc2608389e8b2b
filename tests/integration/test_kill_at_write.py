"""Kill at each write (#16): the operator ends just before its Nth API write in a path, for every N.

The operator runs in the test process (in_process.py), and its test-only write hook ends it
before its Nth write in NAMESPACE (events aside): no write of it lands after that, nothing of
it survives. Each N gets a namespace of its own; the next operator, built at once, must bring
the job of the previous one to where it would have been: one gang generation, each rank
once, the checkpoint the workers reported recorded and resumed from. N grows until the
path completes without reaching it, so every write of the path is a kill point. One launch is
also killed for real: `aisched run` with `AISCHED_TEST_EXIT_AT_WRITE=NAMESPACE:N` exits 137.
"""

from __future__ import annotations

import functools
import gc
import json
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from aisched.kube import labels
from aisched.testing.cluster import (
    FAKE_EXIT_CODE,
    FAKE_TERMINATION_MESSAGE,
    INTERRUPTION_TAINTS,
    TIMEOUT,
    LocalCluster,
    apply,
    job,
    list_objects,
    taint_for_interruption,
    wait_for,
    workers,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job
from tests.integration.in_process import InProcessOperator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.minutes,
    # A killed operator leaves its API connections open, as a dead process would (to the garbage
    # collector here): not a leak of the operator's.
    pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function _SelectorTransport.__del__:pytest.PytestUnraisableExceptionWarning"
    ),
]

HOOK = "AISCHED_TEST_EXIT_AT_WRITE"
MOST_WRITES = 30  # a bound on any path's writes: the loop below ends well before it
RESUME_STEP = 4200
CHECKPOINTED_EXIT_CODE = "75"
RESTART_OVERHEAD_SECONDS = 2
# The real process's kill point in a launch: after its status and Service, before its workers.
SMOKE_WRITE = 3
# The operators' full relist, which repairs what their watches missed. A restarted operator can
# miss a pod deleted between its first relist and its pod watch's first list (it then waits for
# this relist; an interruption killed before its 5th write showed it, subprocess or not): the
# bound after a kill is what the operator promises, this relist and a cycle.
RELIST_SECONDS = 20


@pytest.fixture(scope="module")
def in_process(
    cluster: LocalCluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessOperator]:
    """This file's operators run in the test process; the session's process is stopped meanwhile
    (two operators would both act), and started again after."""
    operator.stop()
    embedded = InProcessOperator(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("in-process") / "operator.log",
        {"resync_seconds": 2, "relist_seconds": RELIST_SECONDS},
    )
    try:
        with embedded.logging_to_file():
            embedded.start()
            yield embedded
            embedded.stop()
    finally:
        # The killed operators' API connections are garbage now: collected here, where their
        # warnings are expected, not in whichever later test's collection happens to find them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        operator.start()


@dataclass
class KillPoints:
    cluster: LocalCluster
    api: client.ApiClient
    operator: InProcessOperator
    namespaces: list[str]
    tainted: list[str]
    queues: list[str]

    def namespace(self) -> str:
        core = client.CoreV1Api(self.api)
        name = f"kill-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name}})
        self.namespaces.append(name)
        wait_for(
            lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
            30,
            f"the default ServiceAccount of {name}",
        )
        return name

    def retire(self, name: str) -> None:
        """A finished point's namespace goes, so that the next operator meets only the live points' objects:
        each point's job names a carbon region of its own, and a fresh operator fetches at most 8 regions it
        never read at once (then 6 a minute); left running, point 10's job found its own region unread."""
        client.CoreV1Api(self.api).delete_namespace(name)
        self.namespaces.remove(name)

    def restart(self, armed_for: str | None = None, n: int = 0) -> None:
        """The operator again, armed to end before write N in namespace ARMED_FOR (or not armed)."""
        self.operator.start(armed_for, n)

    def skip_to(self, moment: datetime) -> None:
        """The operators started from now on live a second past MOMENT (their clock alone moves)."""
        self.operator.clock_skew = moment - datetime.now(UTC) + timedelta(seconds=1)

    def back_to_real_time(self) -> None:
        """An operator on the wall clock again, to prepare the next path as its real start does."""
        if self.operator.clock_skew:
            self.operator.clock_skew = timedelta(0)
            self.restart()

    def untaint(self) -> None:
        """The nodes announced lost stay after all: the node manager lifts its taint and uncordons them."""
        key, _ = INTERRUPTION_TAINTS["aws"]
        while self.tainted:
            node = self.tainted.pop()
            self.cluster.kubectl("taint", "node", node, f"{key}-")
            self.cluster.kubectl("uncordon", node)

    def describe(self, namespace: str) -> str:
        """What a path that did not converge left in NAMESPACE, and the operators' last words."""
        lines = []
        for obj in list_objects(self.cluster, "trainingjobs", namespace):
            lines.append(f"job {obj['metadata']['name']}: {json.dumps(obj.get('status', {}))}")
        for pod in list_objects(self.cluster, "pods", namespace):
            meta = pod["metadata"]
            state = pod["status"].get("containerStatuses") or []
            lines.append(
                f"pod {meta['name']}: {pod['status'].get('phase')} on {pod['spec'].get('nodeName')} "
                f"deleting={meta.get('deletionTimestamp')} finalizers={meta.get('finalizers')} {json.dumps(state)}"
            )
        # Other tenants' pods take GPUs too: where they sit says whether the gang could fit at all.
        result = self.cluster.kubectl("get", "pods", "-A", "--field-selector=status.phase=Running", "-o", "wide")
        lines += ["running pods, every namespace:", result.stdout]
        return "\n".join([*lines, "operator log:", self.operator.log_tail(120)])

    def ended(self) -> bool:
        return self.operator.ended()


@pytest.fixture
def kill_points(
    cluster: LocalCluster, api_client: client.ApiClient, in_process: InProcessOperator
) -> Iterator[KillPoints]:
    points = KillPoints(cluster, api_client, in_process, [], [], [])
    try:
        yield points
    finally:
        points.untaint()
        points.restart()
        core = client.CoreV1Api(api_client)
        for name in points.namespaces:
            core.delete_namespace(name)
        for name in points.queues:
            client.CustomObjectsApi(api_client).delete_cluster_custom_object("aisched.io", "v1alpha1", "queues", name)


def gang(cluster: LocalCluster, namespace: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return job(cluster, namespace, name).get("status", {}), workers(cluster, namespace, name)


def assert_one_whole_gang(status: dict[str, Any], pods: list[dict[str, Any]], replicas: int) -> None:
    """One generation of workers, the status's, each rank once and running."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    generations = {p["metadata"]["labels"][labels.GANG_GENERATION] for p in live}
    ranks = sorted(int(p["metadata"]["labels"][labels.RANK]) for p in live)
    assert generations == {str(status["gangGeneration"])}, (status, generations)
    assert ranks == list(range(replicas)), ranks
    assert all(p["status"].get("phase") == "Running" for p in live)


def report_checkpoint_on_stop(points: KillPoints, namespace: str, name: str, path: str) -> None:
    """NAME's workers, when stopped, exit as having saved step RESUME_STEP at PATH (KWOK plays them)."""
    report = json.dumps({"step": RESUME_STEP, "path": path, "time": datetime.now(UTC).isoformat()})
    armed = {FAKE_EXIT_CODE: CHECKPOINTED_EXIT_CODE, FAKE_TERMINATION_MESSAGE: report}
    for pod in workers(points.cluster, namespace, name):
        client.CoreV1Api(points.api).patch_namespaced_pod(
            pod["metadata"]["name"], namespace, {"metadata": {"annotations": armed}}
        )


def each_kill_point(
    points: KillPoints, prepare: Callable[[str], Any], act: Callable[[str, Any], None], done: Callable[[str, Any], bool]
) -> int:
    """For N = 1, 2, ...: in a fresh namespace, PREPARE (unarmed), arm for N, ACT, and wait until the
    operator ends or the path is DONE. Killed, the next operator must finish it: DONE within the
    bound. Returns how many kill points the path had."""
    for n in range(1, MOST_WRITES):
        points.back_to_real_time()
        namespace = points.namespace()
        setup = prepare(namespace)
        points.restart(armed_for=namespace, n=n)
        act(namespace, setup)
        path_done = functools.partial(done, namespace, setup)
        # The armed operator is a restarted one too: it relists everything before its first write, so it
        # gets the restarted operator's bound (a 60 s bound was missed on a loaded machine: CI, 2026-12).
        try:
            outcome = wait_for(
                lambda: "killed" if points.ended() else ("done" if path_done() else None),  # noqa: B023
                TIMEOUT * 4 + RELIST_SECONDS,
                f"the armed operator to end before write {n} or the path to complete",
            )
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{points.describe(namespace)}") from None
        if outcome == "done":
            return n - 1
        points.restart()
        try:
            # A restarted operator relists everything first; on a loaded machine that takes a while.
            wait_for(path_done, TIMEOUT * 4 + RELIST_SECONDS, f"the path to complete after the kill before write {n}")
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{points.describe(namespace)}") from None
        points.retire(namespace)
    raise AssertionError(f"the path did not complete within {MOST_WRITES} writes")


def launch(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("launch").replicas(2).gpus(1).obj())


def launched(cluster: LocalCluster, namespace: str) -> bool:
    status, pods = gang(cluster, namespace, "launch")
    if status.get("phase") != "Running":
        return False
    assert_one_whole_gang(status, pods, 2)
    return True


def test_a_launch_killed_at_any_write_comes_up_as_one_gang(kill_points: KillPoints) -> None:
    cluster = kill_points.cluster
    points = each_kill_point(
        kill_points, lambda _: None, lambda ns, _: launch(cluster, ns), lambda ns, _: launched(cluster, ns)
    )
    assert points >= 5, f"a launch writes its status, Service, workers and gates: only {points} writes seen"


def test_a_launch_whose_operator_process_exits_at_a_write_comes_up_as_one_gang(
    kill_points: KillPoints, operator: OperatorProcess
) -> None:
    """The smoke test of the in-process kills: `aisched run` itself ends (exit 137) before a write."""
    cluster = kill_points.cluster
    kill_points.operator.stop()
    namespace = kill_points.namespace()
    try:
        operator.extra_env[HOOK] = f"{namespace}:{SMOKE_WRITE}"
        operator.start()
        launch(cluster, namespace)
        wait_for(lambda: operator.process is not None and operator.process.poll() is not None, TIMEOUT, "the exit")
        assert operator.process is not None and operator.process.returncode == 137, operator.log_tail()
        del operator.extra_env[HOOK]
        operator.start()
        try:
            wait_for(lambda: launched(cluster, namespace), TIMEOUT * 4, "the launch after the exit")
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{operator.log_tail(120)}") from None
    finally:
        operator.extra_env.pop(HOOK, None)
        operator.stop()
        kill_points.operator.start()


def test_an_interruption_killed_at_any_write_loses_no_checkpoint(kill_points: KillPoints) -> None:
    cluster, api = kill_points.cluster, kill_points.api

    def running_job(namespace: str) -> dict[str, Any]:
        kill_points.untaint()  # the last kill point's node: every point starts from the whole cluster
        apply(cluster, namespace, a_training_job("spot").replicas(2).gpus(1).set("checkpoint.path", "/ckpt").obj())

        def running() -> dict[str, Any] | None:
            status = gang(cluster, namespace, "spot")[0]
            return status if status.get("phase") == "Running" else None

        status = wait_for(running, TIMEOUT, "the job to run")
        report_checkpoint_on_stop(kill_points, namespace, "spot", "/ckpt/s")
        return status

    def interrupt(namespace: str, before: dict[str, Any]) -> None:
        node = before["placement"]["nodes"][0]
        kill_points.tainted.append(node)
        taint_for_interruption(api, node, "aws")

    def resumed(namespace: str, before: dict[str, Any]) -> bool:
        status, pods = gang(cluster, namespace, "spot")
        if status.get("phase") != "Running" or status["gangGeneration"] == before["gangGeneration"]:
            return False
        assert status["lastCheckpoint"]["step"] == RESUME_STEP, status
        assert_one_whole_gang(status, pods, 2)
        for pod in pods:
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
            assert env["AISCHED_RESUME_STEP"] == str(RESUME_STEP)
        return True

    points = each_kill_point(kill_points, running_job, interrupt, resumed)
    assert points >= 5, f"an interruption checkpoints, stops, records and places again: only {points} writes seen"


def test_a_preemption_killed_at_any_write_runs_one_gang_and_keeps_the_victims_checkpoint(
    kill_points: KillPoints,
) -> None:
    cluster = kill_points.cluster

    def victim_running(namespace: str) -> str:
        queue = f"q-{namespace}"  # two GPUs: the preemptor can only have the victim's
        apply(cluster, "default", a_queue(queue, nominal_gpus=2).obj())
        kill_points.queues.append(queue)
        apply(cluster, namespace, a_training_job("victim").replicas(2).gpus(1).queue(queue).obj())
        wait_for(lambda: gang(cluster, namespace, "victim")[0].get("phase") == "Running", TIMEOUT, "the victim")
        report_checkpoint_on_stop(kill_points, namespace, "victim", "/ckpt/v")
        return queue

    def preempt(namespace: str, queue: str) -> None:
        apply(cluster, namespace, a_training_job("urgent").gpus(2).queue(queue).priority(10).obj())

    def preempted(namespace: str, _: str) -> bool:
        status, pods = gang(cluster, namespace, "urgent")
        # The pods first: the operator lets them go after the status holds their report, so a
        # status read after they are seen gone has it (read before, it may be older than that).
        victim_pods = workers(cluster, namespace, "victim")
        victim = job(cluster, namespace, "victim").get("status", {})
        if status.get("phase") != "Running" or victim_pods:
            return False
        assert_one_whole_gang(status, pods, 1)
        assert (victim["phase"], victim["lastCheckpoint"]["step"]) == ("Queued", RESUME_STEP), victim
        return True

    points = each_kill_point(kill_points, victim_running, preempt, preempted)
    assert points >= 4, f"a preemption stops the victim, records it and starts the preemptor: only {points} writes"


@pytest.fixture
def chunk_kill_points(kill_points: KillPoints, tmp_path: Path) -> Iterator[tuple[KillPoints, Path]]:
    """Kill points of an operator reading file forecasts from a directory, one {region}.csv per test namespace."""
    operator = kill_points.operator
    saved = dict(operator.settings)
    operator.settings.update(
        carbon={"provider": "file", "file_path": str(tmp_path / "{region}.csv"), "min_chunk_seconds": 10},
        restart_overhead_seconds=RESTART_OVERHEAD_SECONDS,
    )
    kill_points.restart()
    try:
        yield kill_points, tmp_path
    finally:  # kill_points then restarts the operator as it was
        operator.clock_skew = timedelta(0)
        operator.settings.clear()
        operator.settings.update(saved)


def test_a_chunk_end_killed_at_any_write_pauses_with_the_checkpoint(
    chunk_kill_points: tuple[KillPoints, Path],
) -> None:
    kill_points, forecasts = chunk_kill_points
    cluster = kill_points.cluster
    work = timedelta(seconds=60)

    def running_chunk(namespace: str) -> datetime:
        # A 10 s grid, cleanest until the first chunk ends (time for the job to start on a loaded
        # machine), dirty long enough for a killed stop to be finished, then clean (less so) for
        # well under the work: the job must run in both windows, and, the first being the cleaner,
        # as much of it as it can there, stopping at its end whenever the job started. The armed
        # operator's clock starts at that end, so no kill point waits for it.
        now = datetime.now(UTC).replace(microsecond=0)
        t0 = now - timedelta(seconds=now.second % 10)
        first_end = t0 + timedelta(seconds=50)
        second = first_end + timedelta(seconds=60)
        windows = [(t0 - timedelta(minutes=1), first_end, 20), (second, second + work * 3 / 4, 40)]
        rows = ["time,intensity"]
        for tick in range(-12, 120):
            moment = t0 + timedelta(seconds=10 * tick)
            intensity = next((g for a, b, g in windows if a <= moment < b), 400)
            rows.append(f"{moment.isoformat()},{intensity}")
        (forecasts / f"{namespace.upper()}.csv").write_text("\n".join(rows) + "\n")
        obj = (
            a_training_job("chunked")
            .replicas(2)
            .gpus(1)
            .set("expectedDurationSeconds", int(work.total_seconds()))
            .set("deadline", (t0 + timedelta(seconds=600)).isoformat())
            .set("checkpoint", {"path": "/ckpt", "costSeconds": 5})
            .set("carbon", {"deferrable": True, "interruptible": True, "region": namespace.upper()})
            .obj()
        )
        apply(cluster, namespace, obj)

        seen: list[dict[str, Any]] = [{}]

        def in_first_chunk() -> dict[str, Any] | None:
            seen[0] = status = gang(cluster, namespace, "chunked")[0]
            return status if status.get("phase") == "Running" and status.get("chunkEnd") else None

        try:
            status = wait_for(in_first_chunk, TIMEOUT, "the first chunk")
        except TimeoutError as error:
            raise AssertionError(f"no first chunk: {seen[0]}") from error
        assert datetime.fromisoformat(status["chunkEnd"]) == first_end, status
        report_checkpoint_on_stop(kill_points, namespace, "chunked", "/ckpt/c")
        kill_points.skip_to(first_end)
        return first_end

    def paused_or_resumed(namespace: str, _: datetime) -> bool:
        """Paused between chunks with the workers' checkpoint, or (a late recovery) resumed from it."""
        pods = workers(cluster, namespace, "chunked")
        status = job(cluster, namespace, "chunked").get("status", {})
        if status.get("phase") == "Deferred" and not pods:
            assert status["reason"] == "PausedBetweenChunks", status
            assert status["lastCheckpoint"]["step"] == RESUME_STEP, status
            assert not status.get("interruptions"), status  # a planned stop is no interruption
            return True
        if status.get("phase") == "Running" and status.get("gangGeneration", 0) >= 2:
            assert status["lastCheckpoint"]["step"] == RESUME_STEP, status
            assert_one_whole_gang(status, pods, 2)
            return True
        return False

    points = each_kill_point(kill_points, running_chunk, lambda *_: None, paused_or_resumed)
    assert points >= 3, f"a chunk end writes its stop, lets the reports go and pauses: only {points} writes seen"
