"""The paginated lists of KubeClient, against a fake API method: no server, no threads."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aisched.kube.client import KubeClient, ListExpiredError

pytestmark = pytest.mark.asyncio


class Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class PagedApi:
    """Serves NAMES in pages at VERSION; a continue token may have expired (410) the first EXPIRE times."""

    def __init__(self, names: list[str], version: str = "100", expire: int = 0) -> None:
        self.names, self.version, self.expire = names, version, expire
        self.requests: list[dict[str, Any]] = []

    def list(self, **kwargs: Any) -> Response:
        self.requests.append(kwargs)
        assert kwargs["_preload_content"] is False
        start = int(kwargs.get("_continue") or 0)
        if start and self.expire:
            self.expire -= 1
            raise ApiException(status=410, reason="Expired")
        end = start + kwargs["limit"]
        metadata = {"resourceVersion": self.version, "continue": str(end) if end < len(self.names) else ""}
        if start:
            metadata["resourceVersion"] = "ignored"  # later pages are served at the first one's version
        items = [{"metadata": {"name": n}} for n in self.names[start:end]]
        return Response({"metadata": metadata, "items": items})


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch) -> KubeClient:
    kube = KubeClient(client.ApiClient())

    async def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    monkeypatch.setattr(kube, "_call", call)
    return kube


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


async def test_a_list_is_read_a_page_at_a_time_and_keeps_the_first_pages_version(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = PagedApi([f"n{i}" for i in range(5)])
    monkeypatch.setattr(kube.core, "list_node", api.list)
    listing = await kube.list_nodes(name_of, page_size=2)
    assert listing.items == ["n0", "n1", "n2", "n3", "n4"]
    assert listing.resource_version == "100"
    assert [(r["limit"], r.get("_continue")) for r in api.requests] == [(2, None), (2, "2"), (2, "4")]


async def test_an_expired_continue_token_starts_the_list_again(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = PagedApi(["a", "b", "c"], expire=1)
    monkeypatch.setattr(kube.core, "list_pod_for_all_namespaces", api.list)
    listing = await kube.list_pods(name_of, page_size=2)
    assert listing.items == ["a", "b", "c"]  # nothing from the abandoned attempt twice
    assert [r.get("_continue") for r in api.requests] == [None, "2", None, "2"]


async def test_a_list_that_keeps_expiring_is_given_up(kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube.core, "list_node", PagedApi(["a", "b"], expire=10).list)
    with pytest.raises(ListExpiredError):
        await kube.list_nodes(name_of, page_size=1)


async def test_other_errors_are_not_retried(kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(**_: Any) -> Response:
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(kube.core, "list_node", forbidden)
    with pytest.raises(ApiException):
        await kube.list_nodes(name_of, page_size=1)


async def test_our_kinds_are_listed_across_namespaces(kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    api = PagedApi(["job"])
    calls: list[tuple[Any, ...]] = []

    def list_cluster_custom_object(*args: Any, **kwargs: Any) -> Response:
        calls.append(args)
        return api.list(**kwargs)

    monkeypatch.setattr(kube.custom, "list_cluster_custom_object", list_cluster_custom_object)
    listing = await kube.list_custom("trainingjobs", name_of, page_size=10)
    assert (listing.items, calls) == (["job"], [("aisched.io", "v1alpha1", "trainingjobs")])


async def test_a_relist_of_our_kinds_asks_for_their_metadata_only(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = PagedApi(["a", "b", "c"])
    paths: list[str] = []

    def call_api(path: str, method: str, **kwargs: Any) -> Response:
        paths.append(path)
        assert kwargs["header_params"]["Accept"].startswith("application/json;as=PartialObjectMetadataList")
        query = dict(kwargs["query_params"])
        return api.list(limit=query["limit"], _continue=query.get("continue"), _preload_content=False)

    monkeypatch.setattr(kube.api_client, "call_api", call_api)
    listing = await kube.list_custom_metadata("trainingjobs", name_of, page_size=2)
    assert listing.items == ["a", "b", "c"]
    assert paths == ["/apis/aisched.io/v1alpha1/trainingjobs"] * 2


async def test_one_object_is_read_by_a_list_of_one_and_none_when_gone(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = {"big": {"metadata": {"name": "big", "generation": 2}}}
    asked: list[tuple[Any, ...]] = []

    def list_namespaced_custom_object(*args: Any, **kwargs: Any) -> Response:
        asked.append((*args, kwargs["field_selector"]))
        name = kwargs["field_selector"].removeprefix("metadata.name=")
        return Response({"metadata": {}, "items": [stored[name]] if name in stored else []})

    monkeypatch.setattr(kube.custom, "list_namespaced_custom_object", list_namespaced_custom_object)
    assert await kube.get_custom("trainingjobs", "ns", "big") == stored["big"]
    assert await kube.get_custom("trainingjobs", "ns", "gone") is None
    assert asked[0] == ("aisched.io", "v1alpha1", "ns", "trainingjobs", "metadata.name=big")
