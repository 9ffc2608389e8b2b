"""Kubernetes' PodGroups for the gangs the operator places: made once a run, never adopted from a tenant.

The API server is an in-memory stand-in for the four calls `PodGroups` makes (create, get, delete through
`KubeClient.send`), answering as the real one does: 409 for a name taken, 404 for one not served or gone,
and a delete that waits for the PodGroup protection finalizer for a while.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from aisched.kube.client import KubeClient
from aisched.kube.workload_api import (
    POD_GROUP_MANAGED_LABEL,
    POD_GROUP_RUN_ANNOTATION,
    PodGroupOwner,
    PodGroups,
    PodGroupTakenError,
)

pytestmark = pytest.mark.asyncio
OWNER = PodGroupOwner("batch/v1", "Job", "sweep", "uid-sweep")


class Custom:
    """The CustomObjectsApi methods `PodGroups` names; `ApiServer.send` answers for them."""

    def create_namespaced_custom_object(self) -> None: ...
    def get_namespaced_custom_object(self) -> None: ...
    def delete_namespaced_custom_object(self) -> None: ...


class ApiServer:
    def __init__(self, *, served: bool = True, finalizer_passes: int = 0) -> None:
        self.custom = Custom()
        self.served = served
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.finalizer_passes = finalizer_passes
        """Gets of a deleted PodGroup that still show it (deleting) before it is gone."""
        self.calls: list[str] = []

    async def send(self, method: Any, *args: Any, **_: Any) -> bytes:
        verb = method.__name__.split("_")[0]
        self.calls.append(verb)
        if not self.served:
            raise ApiException(status=404)
        _group, _version, namespace, _plural, *rest = args
        if verb == "create":
            body = rest[0]
            key = (namespace, body["metadata"]["name"])
            if key in self.objects:
                raise ApiException(status=409)
            self.objects[key] = json.loads(json.dumps(body))
            return b"{}"
        key = (namespace, rest[0])
        if key not in self.objects:
            raise ApiException(status=404)
        found = self.objects[key]
        if verb == "delete":
            found["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"
        elif "deletionTimestamp" in found["metadata"]:
            if self.finalizer_passes == 0:
                del self.objects[key]
                raise ApiException(status=404)
            self.finalizer_passes -= 1
        return json.dumps(found).encode()


def groups(server: ApiServer) -> PodGroups:
    async def no_wait(_: float) -> None:
        return None

    return PodGroups(cast(KubeClient, server), sleep=no_wait)


async def test_a_gangs_pod_group_is_made_with_its_count_its_run_and_its_workload_as_owner() -> None:
    server = ApiServer()
    assert await groups(server).ensure("ns", "aisched-job-sweep", min_count=4, owner=OWNER, run=1)
    made = server.objects[("ns", "aisched-job-sweep")]
    assert made["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert made["metadata"]["annotations"][POD_GROUP_RUN_ANNOTATION] == "1"
    assert [(r["kind"], r["name"], r["uid"]) for r in made["metadata"]["ownerReferences"]] == [
        ("Job", "sweep", "uid-sweep")
    ]


async def test_the_same_runs_pod_group_is_kept_and_an_earlier_runs_is_made_again_once_its_deletion_ends() -> None:
    server = ApiServer(finalizer_passes=2)
    pod_groups = groups(server)
    await pod_groups.ensure("ns", "g", min_count=4, owner=OWNER, run=1)
    assert await pod_groups.ensure("ns", "g", min_count=4, owner=OWNER, run=1)
    assert server.calls == ["create", "create", "get"]  # kept: no delete
    # Preempted and admitted again at 2 pods: the first run's group has scheduled once, so a new one is made.
    assert await pod_groups.ensure("ns", "g", min_count=2, owner=OWNER, run=2)
    again = server.objects[("ns", "g")]
    assert again["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    assert again["metadata"]["annotations"][POD_GROUP_RUN_ANNOTATION] == "2"
    assert "deletionTimestamp" not in again["metadata"]


async def test_a_pod_group_a_tenant_made_first_under_the_gangs_name_is_never_adopted() -> None:
    server = ApiServer()
    server.objects[("ns", "g")] = {"metadata": {"name": "g", "labels": {"team": "a"}}, "spec": {}}
    with pytest.raises(PodGroupTakenError, match="not made by aisched"):
        await groups(server).ensure("ns", "g", min_count=4, owner=OWNER, run=1)
    # Labelled as the operator's, but made for another workload: not this one's either.
    server.objects[("ns", "g")]["metadata"] = {
        "name": "g",
        "labels": {POD_GROUP_MANAGED_LABEL: "true"},
        "ownerReferences": [{"uid": "someone-else"}],
    }
    with pytest.raises(PodGroupTakenError):
        await groups(server).ensure("ns", "g", min_count=4, owner=OWNER, run=1)
    assert "delete" not in server.calls


async def test_a_cluster_that_serves_no_pod_groups_is_told_apart() -> None:
    assert not await groups(ApiServer(served=False)).ensure("ns", "g", min_count=4, owner=OWNER, run=1)
