"""Thin async wrapper over the official client: the writes the operator makes.

The `kubernetes` client is synchronous; every call runs in one of the client's
own threads (as many as its connection pool) so the kopf event loop never
blocks and hundreds of jobs' writes overlap; asyncio's default pool has only
cpu_count + 4 threads. NotFound on delete is success, and AlreadyExists on create
when the object there is the operator's own (`ownership.py`): every write is
idempotent, so a restarted operator can repeat it; an object someone else made
first under that name is refused (`ForeignObjectError`), never adopted.

Every request carries a deadline (`request_timeout_seconds`): a hung API server costs a
reconcile its timeout, never the thread for good. Under leader election every write first
asks the `fence` (the elector's `may_write`), in the thread that is about to send it, so a
replica whose lease has run out sends nothing more even if its event loop was blocked
while the lease ran out, or the write queued for a free thread meanwhile. Requests are
rate-limited as client-go's are (`qps`, `burst`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from aisched.api import GROUP, VERSION
from aisched.kube import labels
from aisched.kube.api_errors import ForeignObjectError
from aisched.kube.events import EventRecorder, TokenBucket
from aisched.kube.ownership import is_own, names_owner

log = logging.getLogger(__name__)
T = TypeVar("T")
API_THREADS = 32  # concurrent API calls; also the size of the connection pool
LIST_ATTEMPTS = 3  # a list whose continue token keeps expiring is given up, for the next relist


class ListExpiredError(Exception):
    """A paginated list kept outliving its continue token."""


@dataclass(frozen=True)
class Listing(Generic[T]):
    """Every object of a kind, converted, and the resourceVersion the list was read at."""

    items: list[T]
    resource_version: str


def api_retries() -> urllib3.Retry:
    """What the API client retries by itself: 429 and 5xx, a few times, after a jittered backoff.

    The API server answers 429 under its priority-and-fairness limits and 5xx while etcd or a
    webhook is unwell, both passing; the Retry-After it sends is honoured. Every write of ours
    is idempotent (AlreadyExists and NotFound are success), so POST and DELETE are retried too.
    A request that times out is not: its deadline (`_request_timeout`) would only multiply.
    """
    return urllib3.Retry(
        total=3,
        connect=2,
        read=0,
        status=3,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=None,  # every method
        backoff_factor=0.2,
        backoff_max=5.0,
        backoff_jitter=0.2,
        raise_on_status=False,  # the last answer goes to the client, which raises ApiException with it
    )


def load_api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the local kubeconfig (KUBECONFIG's
    file unless one is given; given, the client library's default configuration is left alone)."""
    if kubeconfig is not None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_THREADS  # gangs create many pods at once
    configuration.retries = api_retries()
    return client.ApiClient(configuration)


# The list as PartialObjectMetadataList (metadata only), JSON as the fallback of an older server.
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class NotLeadingError(RuntimeError):
    """A write refused before it was sent: this replica no longer holds the leader lease."""


class KubeClient:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        events_per_second: float = 10.0,
        event_burst: int = 50,
        request_timeout_seconds: float = 30.0,
        fence: Callable[[], bool] | None = None,
        qps: float = 50.0,
        burst: int = 100,
        before_write: Callable[[Callable[..., Any], tuple[Any, ...]], None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.before_write = before_write
        """Tests only (`write_killer`): hears of every write just before it is sent."""
        self.request_timeout_seconds = request_timeout_seconds
        self.fence = fence
        # client-go's QPS and burst: whatever a burst of jobs asks, the API server sees at most this.
        self._rate = TokenBucket(per_second=qps, burst=burst)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._threads = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube-api")
        self.events = EventRecorder(self._create_event, per_second=events_per_second, burst=event_burst)

    def close(self, *, wait: bool = False) -> None:
        """No more calls: those queued are dropped, those under way end on their own deadline
        (WAIT: waited for, so that every connection is back in the pool, to be closed with it)."""
        self._threads.shutdown(wait=wait, cancel_futures=True)

    async def _throttle(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(1000):  # bounded: a wake-up takes the token unless another caller got it first
            if (wait := self._rate.wait(loop.time())) <= 0:
                return
            await asyncio.sleep(wait)

    async def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        await self._throttle()
        return await asyncio.get_running_loop().run_in_executor(
            self._threads,
            functools.partial(method, *args, _request_timeout=self.request_timeout_seconds, **kwargs),
        )

    async def send(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """A write whose answer comes back as bytes: the client's model deserialization of it
        would cost more CPU than the request itself. Errors still raise ApiException."""

        def send() -> bytes:
            if self.fence is not None and not self.fence():
                raise NotLeadingError(f"not sent, the leader lease is lost: {getattr(method, '__name__', method)}")
            if self.before_write is not None:
                self.before_write(method, args)
            response = method(*args, _preload_content=False, _request_timeout=self.request_timeout_seconds, **kwargs)
            data: bytes = response.data  # read, so the connection goes back to the pool
            return data

        await self._throttle()
        return await asyncio.get_running_loop().run_in_executor(self._threads, send)

    # -- reads (relists that repair the watch-fed caches) -------------------

    async def list_nodes(self, convert: Callable[[dict[str, Any]], T], *, page_size: int) -> Listing[T]:
        return await self.list_paged(self.core.list_node, convert, page_size)

    async def list_pods(self, convert: Callable[[dict[str, Any]], T], *, page_size: int) -> Listing[T]:
        return await self.list_paged(self.core.list_pod_for_all_namespaces, convert, page_size)

    async def list_resource_claims(self, convert: Callable[[dict[str, Any]], T], *, page_size: int) -> Listing[T]:
        """Every DRA ResourceClaim (resource.k8s.io/v1), in every namespace: what pods hold through them.

        None on a cluster that serves no resource.k8s.io/v1 (before Kubernetes 1.34): no pod holds a claim there.
        """
        method = functools.partial(self.custom.list_cluster_custom_object, "resource.k8s.io", "v1", "resourceclaims")
        try:
            return await self.list_paged(method, convert, page_size)
        except ApiException as error:
            if error.status != 404:
                raise
            log.warning("the cluster serves no resource.k8s.io/v1 ResourceClaims: no DRA claim is counted")
            return Listing([], "")

    async def list_custom(self, plural: str, convert: Callable[[dict[str, Any]], T], *, page_size: int) -> Listing[T]:
        """Every object of one of our kinds, in every namespace."""
        method = functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, plural)
        return await self.list_paged(method, convert, page_size)

    async def list_custom_metadata(
        self, plural: str, convert: Callable[[dict[str, Any]], T], *, page_size: int
    ) -> Listing[T]:
        """The metadata of every object of one of our kinds, as kubectl's `--output name` asks for it.

        A tenant's object may be a MiB and more of template (etcd's limit is 1.5 MiB); a page of
        500 of them was most of a GiB in memory. Its metadata is all a relist reads.
        """

        return await self.list_metadata(f"/apis/{GROUP}/{VERSION}/{plural}", convert, page_size=page_size)

    async def list_metadata(self, path: str, convert: Callable[[dict[str, Any]], T], *, page_size: int) -> Listing[T]:
        """The metadata of every object under the collection PATH (`/apis/<group>/<version>/<plural>`)."""

        def method(**kwargs: Any) -> Any:
            query = [("limit", kwargs["limit"])] + (
                [("continue", kwargs["_continue"])] if "_continue" in kwargs else []
            )
            return self.api_client.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": METADATA_LIST_ACCEPT},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=kwargs.get("_request_timeout"),
            )

        return await self.list_paged(method, convert, page_size)

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One of our objects as the API server has it now; None when it is gone.

        A list of one, by field selector: the operator may list its kinds, and needs no `get` for it.
        """
        response = await self._call(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            field_selector=f"metadata.name={name}",
            _preload_content=False,
        )
        items = json.loads(response.data).get("items") or []
        found: dict[str, Any] | None = items[0] if items else None
        return found

    async def list_paged(self, method: Any, convert: Callable[[dict[str, Any]], T], page_size: int) -> Listing[T]:
        """Every object, PAGE_SIZE at a time, each page CONVERTed before the next is read.

        Only the converted items are held, never the whole list's JSON. A continue
        token that expired between pages (410 Gone: the list took longer than etcd
        keeps its compaction window) restarts the list from the beginning.
        """
        for _ in range(LIST_ATTEMPTS):
            try:
                return await self._list_once(method, convert, page_size)
            except ApiException as error:
                if error.status != 410:
                    raise
                log.warning("a paginated list's continue token expired; listing again from the start")
        raise ListExpiredError(f"the list expired {LIST_ATTEMPTS} times in a row")

    async def _list_once(self, method: Any, convert: Callable[[dict[str, Any]], T], page_size: int) -> Listing[T]:
        items: list[T] = []
        token, version = None, ""
        while True:
            kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            response = await self._call(method, **kwargs)
            page = json.loads(response.data)
            items.extend(convert(obj) for obj in page.get("items") or [])
            metadata = page.get("metadata") or {}
            # Every page of one list is served at the first page's version.
            version = version or metadata.get("resourceVersion") or ""
            token = metadata.get("continue")
            if not token:
                return Listing(items, version)

    # -- writes -------------------------------------------------------------

    async def create(self, obj: dict[str, Any]) -> None:
        """Create OBJ (a Pod, a Service or a GPU share's ResourceClaimTemplate) owned by its first ownerReference.

        AlreadyExists is success only when the object there is ours (an earlier attempt made it):
        ForeignObjectError when it is anyone else's, which is then neither used nor changed. A claim
        template that names our owner but asks another GPU (an earlier attempt's, which chose another) is
        replaced: nothing uses it, as its pod was never made.
        """
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            await self._create(obj)
        except ApiException as error:
            if error.status != 409:
                raise
            existing = await self._existing(obj)
            if existing is None:
                raise  # gone again since: the next attempt creates it
            if is_own(existing, obj):
                return
            if obj["kind"] == "ResourceClaimTemplate" and names_owner(existing, obj):
                await self.delete_claim_template(namespace, name)
                await self._create(obj)  # AlreadyExists again is an error, retried as any other
                return
            owner = (obj["metadata"].get("ownerReferences") or [{}])[0].get("kind", "")
            raise ForeignObjectError(obj["kind"], namespace, name, owner) from None

    async def _create(self, obj: dict[str, Any]) -> None:
        namespace = obj["metadata"]["namespace"]
        if obj["kind"] == "Pod":
            await self.send(self.core.create_namespaced_pod, namespace, obj)
        elif obj["kind"] == "ResourceClaimTemplate":  # a GPU share's (kube/claims.py)
            group, version = obj["apiVersion"].split("/")
            create = self.custom.create_namespaced_custom_object
            await self.send(create, group, version, namespace, "resourceclaimtemplates", obj)
        else:
            await self.send(self.core.create_namespaced_service, namespace, obj)

    async def _existing(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object of OBJ's kind, namespace and name as the API server has it now; None when there is none.

        A list of one, by field selector: the operator lists what it creates, and needs no `get`.
        """
        namespace, selector = obj["metadata"]["namespace"], f"metadata.name={obj['metadata']['name']}"
        if obj["kind"] == "Pod":
            method: Any = functools.partial(self.core.list_namespaced_pod, namespace)
        elif obj["kind"] == "ResourceClaimTemplate":
            group, version = obj["apiVersion"].split("/")
            method = functools.partial(
                self.custom.list_namespaced_custom_object, group, version, namespace, "resourceclaimtemplates"
            )
        else:
            method = functools.partial(self.core.list_namespaced_service, namespace)
        response = await self._call(method, field_selector=selector, _preload_content=False)
        items = json.loads(response.data).get("items") or []
        found: dict[str, Any] | None = items[0] if items else None
        return found

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        body = client.V1DeleteOptions(grace_period_seconds=grace_seconds)
        try:
            await self.send(self.core.delete_namespaced_pod, name, namespace, body=body)
        except ApiException as error:
            if error.status != 404:
                raise

    async def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        """Merge PATCH into Node NAME: a MIG repartition's cordon and its config label (controller/mig.py)."""
        await self.send(self.core.patch_node, name, patch)

    async def release_scheduling_gates(self, namespace: str, name: str) -> None:
        # Removing every gate hands the pod to kube-scheduler.
        patch = [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
        try:
            await self.send(
                self.core.patch_namespaced_pod, name, namespace, patch, _content_type="application/json-patch+json"
            )
        except ApiException as error:
            if error.status not in (404, 422):  # gone, or gates already off
                raise

    async def release_report_finalizer(self, namespace: str, name: str) -> None:
        """Take the report finalizer off a worker pod: a deleted one then goes, as its kubelet asked."""
        # Strategic merge removes our entry only: finalizers other controllers added stay.
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [labels.REPORT_FINALIZER]}}
        try:
            await self.send(
                self.core.patch_namespaced_pod,
                name,
                namespace,
                patch,
                _content_type="application/strategic-merge-patch+json",
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def patch_status(self, plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> str | None:
        """Merge STATUS into the object's status; the resourceVersion it then has (None: it is gone).

        Callers that keep a copy record that version, so a watch event older than their own
        write, still on its way, is known to be older and cannot put the old status back.
        """
        body = {"status": status}
        try:
            if namespace is None:
                data = await self.send(
                    self.custom.patch_cluster_custom_object_status, GROUP, VERSION, plural, name, body
                )
            else:
                data = await self.send(
                    self.custom.patch_namespaced_custom_object_status,
                    GROUP,
                    VERSION,
                    namespace,
                    plural,
                    name,
                    body,
                )
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: nothing to report to
                raise
            return None
        return _resource_version(data)

    # -- other controllers' cluster-scoped kinds (Karpenter's NodeClaims) ----

    async def list_cluster_objects(self, group: str, version: str, plural: str, selector: str) -> list[dict[str, Any]]:
        """Objects of a cluster-scoped kind, by label selector (a few: one page)."""
        response = await self._call(
            self.custom.list_cluster_custom_object,
            group,
            version,
            plural,
            label_selector=selector,
            _preload_content=False,
        )
        items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
        return items

    async def create_cluster_object(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> None:
        await self.send(self.custom.create_cluster_custom_object, group, version, plural, obj)

    async def delete_claim_template(self, namespace: str, name: str) -> None:
        """A departed pod's ResourceClaimTemplate (kube/claims.py); one already gone is no error."""
        try:
            await self.send(
                self.custom.delete_namespaced_custom_object,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaimtemplates",
                name,
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def delete_cluster_object(self, group: str, version: str, plural: str, name: str) -> None:
        try:
            await self.send(self.custom.delete_cluster_custom_object, group, version, plural, name)
        except ApiException as error:
            if error.status != 404:
                raise

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        try:
            await self.send(
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body=client.V1DeleteOptions(propagation_policy="Background"),
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def scale_custom(self, plural: str, namespace: str, name: str, replicas: int) -> None:
        """Set spec.replicas through the scale subresource, the path `kubectl scale` and HPA take."""
        body = {"spec": {"replicas": replicas}}
        try:
            await self.send(
                self.custom.patch_namespaced_custom_object_scale,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def annotate_custom(self, plural: str, namespace: str, name: str, annotations: dict[str, str]) -> None:
        body = {"metadata": {"annotations": annotations}}
        try:
            await self.send(
                self.custom.patch_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def apply_service(self, obj: dict[str, Any]) -> bool:
        """Create the Service, or bring the fields we own up to date if it is ours; False when a
        Service of that name exists and is someone else's (it is left as it is).

        Ours means its first owner reference is OBJ's owner, the one we create it with. A
        JSON patch that only tests that is the check: it needs no read permission and changes
        nothing; server-side apply, which would merge our owner reference into anyone's
        Service, runs only after it.
        """
        metadata = obj["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        owner = metadata["ownerReferences"][0]["uid"]
        ours = [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owner}]
        try:
            await self.send(
                self.core.patch_namespaced_service, name, namespace, ours, _content_type="application/json-patch+json"
            )
        except ApiException as error:
            if error.status == 404:
                await self.create(obj)  # AlreadyExists (a race with its creator) is looked at next time
                return True
            if error.status == 422:  # the test failed: no owner, or another
                return False
            raise
        await self.send(
            self.core.patch_namespaced_service,
            name,
            namespace,
            obj,
            field_manager="aisched",
            force=True,  # ours: take back fields someone edited
            _content_type="application/apply-patch+yaml",
        )
        return True

    def post_event(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """An Event on `obj`, so `kubectl describe` tells its story; queued, sent by `send_events`."""
        self.events.record(obj, event_type, reason, message)

    async def send_events(self) -> None:
        await self.events.run()

    async def _create_event(self, event: dict[str, Any]) -> None:
        try:
            await self.send(self.core.create_namespaced_event, event["metadata"]["namespace"], event)
        except ApiException as error:
            log.warning(
                "could not post event %s on %s: %s", event["reason"], event["involvedObject"]["name"], error.reason
            )


def _resource_version(answer: bytes) -> str | None:
    """The resourceVersion of the object an API write answered with; None where it has none."""
    try:
        version = json.loads(answer).get("metadata", {}).get("resourceVersion")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None
