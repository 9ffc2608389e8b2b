"""TrainingJobs competing for GPUs on the local GPU cluster (small preset, hack/clusters/small.yaml).

A rack two gangs both want, elastic gangs that grow into idle GPUs and shrink
for a higher priority, and two operator replicas of which only the one holding
the Lease acts.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    get_object,
    job,
    make_pod_exit,
    node_labels,
    running_pods,
    wait_for,
    wait_phase,
    workers,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
# The preset's only GB200 rack: 4 nodes x 4 GPUs in one NVLink domain. 12 of its 16 GPUs is most of it.
GB200 = "NVIDIA-GB200"
# 4 on-demand nodes x 8 GPUs in two racks of zone a (the spot H100s are out of reach of on-demand jobs).
H100 = "NVIDIA-H100-80GB-HBM3"
RACK_LABEL = "aisched.io/rack"
LEASE_NAME = "aisched-leader-test"


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def environment(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}


def current_gang(cluster: LocalCluster, namespace: str, name: str, replicas: int) -> list[dict[str, Any]]:
    """The Running pods of the job's current gang generation, once all REPLICAS of them run and no other pod is left."""
    # A job is written no status before its first placement: no status yet means no gang yet.
    status = job(cluster, namespace, name).get("status")
    if not status:
        return []
    generation = str(status.get("gangGeneration"))
    pods = workers(cluster, namespace, name)
    gang = [
        p
        for p in running_pods(cluster, namespace, name)
        if p["metadata"]["labels"]["aisched.io/gang-generation"] == generation
    ]
    return gang if len(gang) == replicas == len(pods) else []


def ranks_and_world(pods: list[dict[str, Any]]) -> tuple[list[str], set[str]]:
    envs = [environment(p) for p in pods]
    return sorted(e["PET_NODE_RANK"] for e in envs), {e["PET_NNODES"] for e in envs}


# -- two gangs, one rack ----------------------------------------------------------------------


def rack_gang(name: str) -> dict[str, Any]:
    return a_training_job(name).gpu_type(GB200).replicas(3).gpus(4).required_level("Rack").obj()


def test_two_gangs_wanting_most_of_one_rack_run_one_after_the_other(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, rack_gang("first"))
    first = wait_phase(cluster, namespace, "first", "Running")["status"]
    racks = {node_labels(cluster, n)[RACK_LABEL] for n in first["placement"]["nodes"]}
    assert len(racks) == 1

    apply(cluster, namespace, rack_gang("second"))
    why = "needs 12 GPUs (3 x 4 NVIDIA-GB200) within one Rack; the largest Rack has 4 free"
    second = wait_for(
        lambda: (s := job(cluster, namespace, "second").get("status", {})) and why in s.get("message", "") and s,
        TIMEOUT,
        "the second gang to say why it waits",
    )
    assert (second["phase"], second["reason"]) == ("Queued", "InsufficientGPUs")
    admitted = condition(second, "Admitted")
    assert admitted is not None and admitted["status"] == "False" and why in admitted["message"]
    assert workers(cluster, namespace, "second") == []

    for pod in running_pods(cluster, namespace, "first"):
        make_pod_exit(api_client, pod["metadata"]["name"], namespace, "Succeeded")
    wait_phase(cluster, namespace, "first", "Succeeded")
    second = wait_phase(cluster, namespace, "second", "Running")["status"]
    gang = wait_for(lambda: current_gang(cluster, namespace, "second", 3), TIMEOUT, "the whole second gang to run")
    nodes = sorted(p["spec"]["nodeName"] for p in gang)
    assert nodes == sorted(second["placement"]["nodes"])
    assert {node_labels(cluster, n)[RACK_LABEL] for n in nodes} == racks
    assert ranks_and_world(gang) == (["0", "1", "2"], {"3"})


# -- elastic gangs ----------------------------------------------------------------------------


@pytest.fixture
def quick_growth_queue(cluster: LocalCluster) -> Iterator[str]:
    """A Queue whose gangs may grow (and be time-sliced) after a 5-second run, deleted afterwards.

    A gang grows once it has run its queue's minimum run time on its placement: growing
    relaunches it from its checkpoint, which a gang that just started should not pay for at once.
    """
    name = f"grow-{uuid.uuid4().hex[:6]}"
    apply(cluster, "default", a_queue(name, nominal_gpus=64).time_slicing(5).obj())
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def test_an_elastic_gang_starts_at_what_fits_grows_into_idle_gpus_and_shrinks_for_a_higher_priority(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, quick_growth_queue: str
) -> None:
    blocker = a_training_job("blocker").queue(quick_growth_queue).gpu_type(H100).replicas(2).gpus(8)
    apply(cluster, namespace, blocker.obj())
    wait_phase(cluster, namespace, "blocker", "Running")

    elastic = a_training_job("elastic").queue(quick_growth_queue).gpu_type(H100).gpus(8).replicas(4).elastic(1, 4)
    apply(cluster, namespace, elastic.obj())
    gang = wait_for(lambda: current_gang(cluster, namespace, "elastic", 2), TIMEOUT, "the elastic gang at 2")
    assert job(cluster, namespace, "elastic")["status"]["replicas"] == 2
    assert ranks_and_world(gang) == (["0", "1"], {"2"})
    started_on = {p["spec"]["nodeName"] for p in gang}

    for pod in running_pods(cluster, namespace, "blocker"):
        make_pod_exit(api_client, pod["metadata"]["name"], namespace, "Succeeded")
    gang = wait_for(lambda: current_gang(cluster, namespace, "elastic", 4), TIMEOUT, "the elastic gang to grow to 4")
    grown = job(cluster, namespace, "elastic")["status"]
    assert (grown["phase"], grown["replicas"], grown["gpus"]) == ("Running", 4, 32)
    assert condition(grown, "Admitted")["reason"] == "Grown"  # type: ignore[index]
    assert ranks_and_world(gang) == (["0", "1", "2", "3"], {"4"})
    grown_on = {p["spec"]["nodeName"] for p in gang}
    assert started_on < grown_on and len(grown_on) == 4

    urgent_job = a_training_job("urgent").queue(quick_growth_queue).gpu_type(H100).priority(100)
    apply(cluster, namespace, urgent_job.replicas(2).gpus(8).obj())
    urgent = wait_for(lambda: current_gang(cluster, namespace, "urgent", 2), TIMEOUT, "the urgent gang to run")
    gang = wait_for(lambda: current_gang(cluster, namespace, "elastic", 2), TIMEOUT, "the elastic gang to shrink to 2")
    shrunk = job(cluster, namespace, "elastic")["status"]
    assert (shrunk["phase"], shrunk["replicas"]) == ("Running", 2)
    assert condition(shrunk, "Admitted")["reason"] == "Shrunk"  # type: ignore[index]
    assert condition(shrunk, "Preempted") is None
    assert shrunk["gangGeneration"] == grown["gangGeneration"] + 1
    assert ranks_and_world(gang) == (["0", "1"], {"2"})
    shrunk_on = {p["spec"]["nodeName"] for p in gang}
    assert shrunk_on < grown_on  # the ranks that stay keep their nodes
    assert not shrunk_on & {p["spec"]["nodeName"] for p in urgent}


# -- two replicas, one Lease ------------------------------------------------------------------


def is_leading(replica: OperatorProcess) -> bool:
    """What the replica says of itself: its aisched_leader gauge."""
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.metrics_port}/metrics", timeout=2) as response:
        lines = response.read().decode().splitlines()
    return "aisched_leader 1.0" in lines


def the_leader(replicas: list[OperatorProcess]) -> OperatorProcess | None:
    """The replica that leads, provided exactly one of them does."""
    alive = [r for r in replicas if r.process is not None and r.process.poll() is None]
    leading = [r for r in alive if is_leading(r)]
    assert len(leading) <= 1, "two replicas act at once"
    return leading[0] if leading else None


class PodsCreated:
    """Every pod created in a namespace while it runs, by name, from a watch: none slips between two polls."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.names: list[str] = []
        self.error: BaseException | None = None
        self._core = client.CoreV1Api(api)
        self._namespace = namespace
        self._stopped = threading.Event()
        since = self._core.list_namespaced_pod(namespace).metadata.resource_version
        self._thread = threading.Thread(target=self._follow, args=(since,), daemon=True)
        self._thread.start()

    def _follow(self, since: str) -> None:
        try:
            while not self._stopped.is_set():
                # Short server-side timeouts, resumed where they ended, so that stop() returns promptly.
                events = watch.Watch().stream(
                    self._core.list_namespaced_pod, self._namespace, resource_version=since, timeout_seconds=1
                )
                for event in events:
                    since = event["object"].metadata.resource_version
                    if event["type"] == "ADDED":
                        self.names.append(event["object"].metadata.name)
        except BaseException as error:  # handed to the test by stop()
            self.error = error

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)
        if self.error is not None:
            raise self.error


@pytest.fixture
def two_replicas(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    """Two replicas electing a leader on a Lease of their own, with the session's operator stopped meanwhile.

    The session operator runs --standalone: it never looks at the Lease, so beside two electing
    replicas it would act too, and the test could not tell who placed what. It is session-wide
    (once any module started it, it stays up), so a module of its own would not keep it away:
    stopped here and started again afterwards, it is the same operator for the tests that follow.
    """
    env = {"AISCHED_LEADER_NAMESPACE": namespace, "AISCHED_LEADER_LEASE_NAME": LEASE_NAME}
    replicas = [
        OperatorProcess(cluster, tmp_path / f"replica-{i}.log", extra_env=env, standalone=False) for i in range(2)
    ]
    operator.stop()
    try:
        for replica in replicas:
            replica.start()
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()
        operator.start()


def test_two_replicas_never_act_at_once_and_the_standby_takes_over(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, two_replicas: list[OperatorProcess]
) -> None:
    created = PodsCreated(api_client, namespace)
    try:
        leader = wait_for(lambda: the_leader(two_replicas), TIMEOUT, "one replica to lead")
        standby = next(r for r in two_replicas if r is not leader)
        lease = get_object(cluster, "lease", LEASE_NAME, namespace)["spec"]
        assert lease["holderIdentity"]

        apply(cluster, namespace, a_training_job("before").replicas(2).gpus(1).obj())
        wait_for(lambda: current_gang(cluster, namespace, "before", 2), TIMEOUT, "the first job to run")
        assert the_leader(two_replicas) is leader and not is_leading(standby)

        leader.kill()
        killed = time.monotonic()
        wait_for(lambda: the_leader(two_replicas) is standby, TIMEOUT, "the standby to take over")
        took = time.monotonic() - killed
        taken = get_object(cluster, "lease", LEASE_NAME, namespace)["spec"]
        assert taken["holderIdentity"] != lease["holderIdentity"]
        assert took < lease["leaseDurationSeconds"] + 10, f"took over after {took:.0f}s"

        apply(cluster, namespace, a_training_job("after").replicas(2).gpus(1).obj())
        wait_for(lambda: current_gang(cluster, namespace, "after", 2), TIMEOUT, "the new leader to place a job")
        assert current_gang(cluster, namespace, "before", 2)
        for name in ("before", "after"):
            assert job(cluster, namespace, name)["status"]["gangGeneration"] == 1
        # Each job was placed once: one gang generation, each rank created once, never again.
        expected = ["after-g1-w0", "after-g1-w1", "before-g1-w0", "before-g1-w1"]
        wait_for(lambda: set(expected) <= set(created.names), 10, "the watch to see every pod")
        assert sorted(created.names) == expected
    finally:
        created.stop()
