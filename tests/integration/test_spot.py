"""Spot capacity end to end (issue 5): interruption storms and deadlines, on the local GPU cluster.

The small preset has five spot nodes (two H100, one 4 x L4, two A100) and
on-demand nodes of every product; nodes say which they are with Karpenter's
capacity-type label, as on EKS.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import (
    INTERRUPTION_TAINTS,
    TIMEOUT,
    LocalCluster,
    apply,
    job,
    node_labels,
    running_pods,
    save_on_sigterm,
    taint_for_interruption,
    wait_for,
    wait_phase,
)
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
EXPECTED_DURATION_S = 3600
CHECKPOINT_INTERVAL_S = 30  # the shortest the API allows, so the storm test can outlast one


def spot_nodes(api: client.ApiClient) -> list[str]:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{CAPACITY_TYPE_LABEL}=spot").items
    return sorted(n.metadata.name for n in nodes)


@pytest.fixture
def tainted(cluster: LocalCluster, api_client: client.ApiClient) -> Iterator[list[str]]:
    """Nodes a test announces the loss of (append, then taint); their notice is withdrawn afterwards."""
    nodes: list[str] = []
    yield nodes
    withdraw_notice(cluster, nodes)


def withdraw_notice(cluster: LocalCluster, nodes: list[str]) -> None:
    """The nodes stay after all: the node manager lifts its taint and uncordons them."""
    key, _ = INTERRUPTION_TAINTS["aws"]
    for node in nodes:
        cluster.kubectl("taint", "node", node, f"{key}-")
        cluster.kubectl("uncordon", node)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def capacity_condition(status: dict[str, Any]) -> dict[str, Any]:
    condition: dict[str, Any] = next(c for c in status.get("conditions", []) if c["type"] == "Capacity")
    return condition


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def test_an_interruption_storm_leaves_every_job_running_again(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, tainted: list[str]
) -> None:
    names = [f"storm-{i}" for i in range(5)]
    for i, name in enumerate(names):
        apply(
            cluster,
            namespace,
            a_training_job(name)
            .replicas(2)
            .gpus(2)
            .spot("Prefer" if i % 2 else "Only")
            .set("checkpoint.path", "/ckpt")
            .set("checkpoint.intervalSeconds", CHECKPOINT_INTERVAL_S)
            .obj(),
        )
    before = {name: wait_phase(cluster, namespace, name, "Running")["status"] for name in names}
    assert {s["placement"]["capacityType"] for s in before.values()} == {"Spot"}
    # Train longer than an interval first: a notice save must spare all that work, not only the last interval.
    started = max(datetime.fromisoformat(s["startTime"]) for s in before.values())
    time.sleep(max(0.0, (started - datetime.now(UTC)).total_seconds() + CHECKPOINT_INTERVAL_S + 1))
    nodes_of = {name: set(s["placement"]["nodes"]) for name, s in before.items()}

    # A third of the spot nodes at once: those holding the most gangs, so the storm hits hard.
    spot = spot_nodes(api_client)
    load = {node: sum(node in nodes for nodes in nodes_of.values()) for node in spot}
    tainted.extend(sorted(spot, key=lambda n: -load[n])[: math.ceil(len(spot) / 3)])
    hit = [name for name in names if nodes_of[name] & set(tainted)]
    spared = [name for name in names if name not in hit]
    assert hit and spared, f"the storm should hit some gangs and spare others: {nodes_of}, tainted {tainted}"
    spared_pods = {name: uids(running_pods(cluster, namespace, name)) for name in spared}
    resume_step = {name: 1000 + 100 * i for i, name in enumerate(names)}
    for name in hit:
        for pod in running_pods(cluster, namespace, name):
            save_on_sigterm(api_client, pod["metadata"]["name"], namespace, resume_step[name])
    for node in tainted:
        taint_for_interruption(api_client, node, "aws")

    def back_running(name: str) -> dict[str, Any] | None:
        status: dict[str, Any] = job(cluster, namespace, name).get("status", {})
        moved = status.get("gangGeneration", 0) > before[name]["gangGeneration"]
        return status if moved and status.get("phase") == "Running" else None

    for name in hit:
        status = wait_for(partial(back_running, name), TIMEOUT * 2, f"{name} to run again")
        assert status["interruptions"] == 1, status
        assert status["lastCheckpoint"]["step"] == resume_step[name], status
        assert not set(status["placement"]["nodes"]) & set(tainted), status["placement"]
        pods = running_pods(cluster, namespace, name)
        assert {p["spec"]["nodeName"] for p in pods} == set(status["placement"]["nodes"])
        assert {env_of(p)["AISCHED_RESUME_STEP"] for p in pods} == {str(resume_step[name])}
        # Workers saved on the notice: at most the work since the last checkpoint is lost.
        assert 0 <= status["lostWorkSeconds"] <= status["checkpointIntervalSeconds"], status
    for name in spared:
        status = job(cluster, namespace, name)["status"]
        assert status["phase"] == "Running"
        assert status["gangGeneration"] == before[name]["gangGeneration"]
        assert not status.get("interruptions")
        assert uids(running_pods(cluster, namespace, name)) == spared_pods[name]


def deadline_job(name: str, slack: timedelta) -> dict[str, Any]:
    """A Prefer job of EXPECTED_DURATION_S whose deadline leaves SLACK beyond its expected duration."""
    deadline = datetime.now(UTC) + timedelta(seconds=EXPECTED_DURATION_S) + slack
    return (
        a_training_job(name)
        .replicas(2)
        .gpus(4)
        .spot("Prefer")
        .set("checkpoint.path", "/ckpt")
        .set("expectedDurationSeconds", EXPECTED_DURATION_S)
        .set("deadline", rfc3339(deadline))
        .obj()
    )


def capacity_types_of_pods(cluster: LocalCluster, namespace: str, name: str) -> set[str]:
    pods = running_pods(cluster, namespace, name)
    return {node_labels(cluster, p["spec"]["nodeName"])[CAPACITY_TYPE_LABEL] for p in pods}


@pytest.mark.parametrize(
    ("slack", "capacity", "condition"),
    [
        # A minute of slack: less than one restart after an interruption costs (5 minutes by default).
        (timedelta(minutes=1), ("OnDemand", "on-demand"), ("DeadlineNeedsOnDemand", "deadline")),
        (timedelta(hours=3), ("Spot", "spot"), ("SpotAvailable", "slack")),
    ],
    ids=["close-deadline-on-demand", "comfortable-deadline-spot"],
)
def test_a_prefer_job_runs_on_demand_only_when_its_deadline_needs_it(
    cluster: LocalCluster, namespace: str, slack: timedelta, capacity: tuple[str, str], condition: tuple[str, str]
) -> None:
    """CAPACITY: the placement's capacity type and its nodes' label; CONDITION: its reason and a word of its message."""
    placement_capacity, node_capacity = capacity
    reason, why = condition
    apply(cluster, namespace, deadline_job("deadlined", slack))
    status = wait_phase(cluster, namespace, "deadlined", "Running")["status"]
    assert status["placement"]["capacityType"] == placement_capacity
    assert capacity_types_of_pods(cluster, namespace, "deadlined") == {node_capacity}
    seen = capacity_condition(status)
    assert seen["reason"] == reason, seen
    assert why in seen["message"]


def test_when_spot_is_gone_a_job_short_of_slack_goes_on_demand_and_one_with_room_waits(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, tainted: list[str]
) -> None:
    tainted.extend(spot_nodes(api_client))
    for node in tainted:
        taint_for_interruption(api_client, node, "aws")
    # 15 minutes of slack: more than a restart needs, less than the reserve (a fifth of the work) kept for outages.
    apply(cluster, namespace, deadline_job("short", timedelta(minutes=15)))
    apply(cluster, namespace, deadline_job("roomy", timedelta(hours=3)))
    status = wait_phase(cluster, namespace, "short", "Running")["status"]
    assert status["placement"]["capacityType"] == "OnDemand"
    assert capacity_types_of_pods(cluster, namespace, "short") == {"on-demand"}
    assert capacity_condition(status)["reason"] == "SpotOutageOnDemand"
    waiting = wait_for(
        lambda: (s := job(cluster, namespace, "roomy").get("status", {})).get("reason") == "WaitingForSpot" and s,
        TIMEOUT,
        "the roomy job to wait for spot",
    )
    assert waiting["phase"] == "Queued" and "slack" in waiting["message"], waiting
    # The outage ends: the job that waited runs on spot after all.
    withdraw_notice(cluster, tainted)
    status = wait_phase(cluster, namespace, "roomy", "Running")["status"]
    assert status["placement"]["capacityType"] == "Spot"
    assert capacity_types_of_pods(cluster, namespace, "roomy") == {"spot"}
