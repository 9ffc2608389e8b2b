"""Every object the operator makes is its own: AlreadyExists is success only for the object it would have made.

The predicate (`ownership.is_own`) against objects as the API server stores them, and the client's create
path against an API double whose create answers 409 and whose list shows what is there."""

from __future__ import annotations

import copy
import json
from typing import Any
from unittest.mock import MagicMock

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aisched.kube.api_errors import ForeignObjectError, refused_create
from aisched.kube.claims import PodShare, build_share_claim_template, with_share_claim
from aisched.kube.client import KubeClient
from aisched.kube.ownership import is_own

OWNER = {
    "apiVersion": "aisched.io/v1alpha1",
    "kind": "TrainingJob",
    "name": "x",
    "uid": "job-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}
OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "x"}


SHARE = PodShare("gpu-1", 10, 800)


def _template(share: PodShare = SHARE) -> dict[str, Any]:
    return build_share_claim_template("team-a", "x-g1-w0", share, OWNER, OURS)


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    """OBJ as the API server keeps it: defaults filled in, quantities canonical, metadata of its own."""
    stored = copy.deepcopy(obj)
    stored["metadata"] |= {"uid": "u1", "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z"}
    for request in stored.get("spec", {}).get("spec", {}).get("devices", {}).get("requests", []):
        request["exactly"] |= {"allocationMode": "ExactCount", "count": 1}
    return stored


def _pod() -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "team-a", "name": "x-g1-w0", "labels": dict(OURS), "ownerReferences": [OWNER]},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "n1"},
            "containers": [{"name": "worker", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
        },
    }
    return pod


def test_a_template_made_first_by_a_tenant_that_asks_every_gpu_is_not_ours_even_naming_our_job() -> None:
    foreign = _stored(_template())
    foreign["spec"]["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "All",
    }
    assert not is_own(foreign, _template())
    assert is_own(_stored(_template()), _template())


def test_our_template_as_stored_is_ours_and_another_share_or_owner_is_not() -> None:
    canonical = _stored(_template(PodShare("gpu-1", 1000, 1024)))
    canonical["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = {
        "compute": "1k",
        "memory": "1Gi",
    }
    assert is_own(canonical, _template(PodShare("gpu-1", 1000, 1024)))
    assert not is_own(_stored(_template(PodShare("gpu-2", 10, 800))), _template())
    elsewhere = _stored(_template())
    elsewhere["metadata"]["ownerReferences"] = [{**OWNER, "uid": "another-job"}]
    assert not is_own(elsewhere, _template())
    unowned = _stored(_template())
    del unowned["metadata"]["ownerReferences"]
    assert not is_own(unowned, _template())


def test_a_pod_is_ours_only_with_our_labels_node_claims_and_resources() -> None:
    stored = _stored(_pod())
    stored["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "2"}  # defaulted from limits
    stored["spec"] |= {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always"}
    assert is_own(stored, _pod())
    more = copy.deepcopy(stored)
    more["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    assert not is_own(more, _pod())
    claimed = with_share_claim(copy.deepcopy(stored), "someone-elses", PodShare("gpu-0", 10, 1))
    assert not is_own(claimed, _pod())


def test_a_service_is_ours_only_with_our_selector_and_headless() -> None:
    ours = {
        "kind": "Service",
        "metadata": {"namespace": "team-a", "name": "x", "ownerReferences": [OWNER]},
        "spec": {"clusterIP": "None", "selector": OURS},
    }
    assert is_own(_stored(ours), ours)
    theirs = _stored(ours)
    theirs["spec"] = {"clusterIP": "10.0.0.7", "selector": {"app": "mine"}}
    assert not is_own(theirs, ours)


def _client(existing: dict[str, Any] | None) -> tuple[KubeClient, MagicMock]:
    kube = KubeClient(client.ApiClient())
    custom = MagicMock(spec=client.CustomObjectsApi)
    custom.create_namespaced_custom_object.side_effect = ApiException(status=409, reason="AlreadyExists")
    custom.list_namespaced_custom_object.return_value.data = json.dumps({"items": [existing] if existing else []})
    kube.custom = custom
    kube.core = MagicMock(spec=client.CoreV1Api, side_effect=AssertionError("must not be called"))
    return kube, custom


def _squatted() -> dict[str, Any]:
    """The template a tenant made first under the worker's name, before the job (and its uid) existed."""
    foreign = _stored(_template())
    foreign["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    del foreign["metadata"]["ownerReferences"]
    return foreign


@pytest.mark.asyncio
async def test_already_exists_of_a_foreign_template_is_refused_with_what_to_do() -> None:
    kube, custom = _client(_squatted())
    with pytest.raises(ForeignObjectError) as refused:
        await kube.create(_template())
    message = "ResourceClaimTemplate team-a/x-g1-w0 exists and is not aisched's: delete it or rename the job"
    assert refused_create(refused.value) == message
    # It was read by name (a list of one), and nothing was written to it.
    assert custom.list_namespaced_custom_object.call_args.kwargs["field_selector"] == "metadata.name=x-g1-w0"
    assert custom.create_namespaced_custom_object.call_count == 1
    custom.patch_namespaced_custom_object.assert_not_called()
    custom.delete_namespaced_custom_object.assert_not_called()


@pytest.mark.asyncio
async def test_already_exists_of_our_own_template_is_success_and_of_one_gone_again_an_error_to_retry() -> None:
    kube, custom = _client(_stored(_template()))
    await kube.create(_template())
    assert custom.create_namespaced_custom_object.call_count == 1
    custom.delete_namespaced_custom_object.assert_not_called()
    gone, _ = _client(None)
    with pytest.raises(ApiException) as again:
        await gone.create(_template())
    assert again.value.status == 409 and refused_create(again.value) is None


@pytest.mark.asyncio
async def test_a_template_naming_our_job_that_asks_another_gpu_is_replaced_never_used() -> None:
    stale = _stored(_template(PodShare("gpu-3", 10, 800)))  # an earlier attempt chose another GPU
    kube, custom = _client(stale)
    custom.create_namespaced_custom_object.side_effect = [ApiException(status=409, reason="AlreadyExists"), MagicMock()]
    await kube.create(_template())
    assert custom.delete_namespaced_custom_object.call_args.args[-2:] == ("resourceclaimtemplates", "x-g1-w0")
    assert custom.create_namespaced_custom_object.call_count == 2
