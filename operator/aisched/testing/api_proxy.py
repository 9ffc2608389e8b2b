"""A proxy in front of the local cluster's API server that can open watch gaps and serve stale lists.

The operator under test talks plain HTTP to the proxy (`write_kubeconfig`); the
proxy forwards each request to the API server with the admin's client
certificate, streaming watch responses as they come. Two faults a real cluster
has, on demand:

- `watch_gap(plural)`: the open watches of that resource are cut and every new
  one is answered 410 Gone, as when a watch fell behind etcd's compaction. The
  client (kopf) lists again and never hears of what was deleted meanwhile: the
  operator's own relist has to find it.
- `stale_lists(plural)`: the operator's lists of that resource (kopf's are
  passed through) all get the answer of the first one made after the call, with
  that list's resourceVersion: a relist that read the cluster before the watch
  moved on. The snapshot is one page: for small clusters only.

Every watch event the proxy passed on is recorded (`watch_events`), so a test
knows the operator was told of a change before it makes a stale list race it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from aisched.testing.cluster import LocalCluster, free_ports, wait_for

HOP_BY_HOP = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "te", "trailer"}
)
GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version",
        "reason": "Expired",
        "code": 410,
    },
}


def collection_of(path: str) -> str | None:
    """The resource (plural) a collection path names: /api/v1/pods, /apis/g/v/namespaces/ns/x; else None."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return rest[0] if len(rest) == 1 else None


@dataclass(frozen=True)
class WatchEvent:
    resource: str
    type: str
    namespace: str
    name: str


@dataclass
class _Stale:
    body: bytes | None = None


@dataclass
class ApiProxy:
    cluster: LocalCluster
    port: int = 0
    watch_events: list[WatchEvent] = field(default_factory=list)
    lists: Counter[str] = field(default_factory=Counter)
    """Lists passed through to the API server, by resource."""
    stale_served: Counter[str] = field(default_factory=Counter)
    """Lists answered from a stale snapshot, by resource."""
    _gaps: set[str] = field(default_factory=set)
    _stale: dict[str, _Stale] = field(default_factory=dict)
    _watches: dict[str, set[asyncio.BaseTransport]] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    _pki: tempfile.TemporaryDirectory[str] | None = None
    _upstream: str = ""

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        if not self.port:
            (self.port,) = free_ports(1)
        self._thread = threading.Thread(target=self._loop.run_forever, name="api-proxy", daemon=True)
        self._thread.start()
        self._run(self._start())

    def stop(self) -> None:
        if self._thread is None:
            return
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None
        # Closed here, not by the garbage collector: its ResourceWarning would fail whichever test runs then.
        self._loop.close()
        if self._pki is not None:
            self._pki.cleanup()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that sends the operator through the proxy."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- faults -----------------------------------------------------------------------

    @contextlib.contextmanager
    def watch_gap(self, resource: str) -> Iterator[None]:
        """While inside, no watch of RESOURCE delivers anything: each is cut, or answered 410 Gone."""
        self._run(self._open_gap(resource))
        try:
            yield
        finally:
            self._loop.call_soon_threadsafe(self._gaps.discard, resource)

    @contextlib.contextmanager
    def stale_lists(self, resource: str, timeout: float = 60) -> Iterator[None]:
        """Inside, the operator's lists of RESOURCE all read as the first one did; entered once it was made."""
        stale = _Stale()
        self._loop.call_soon_threadsafe(self._stale.__setitem__, resource, stale)
        try:
            wait_for(lambda: stale.body is not None, timeout, f"the operator to list {resource}")
            yield
        finally:
            self._loop.call_soon_threadsafe(self._stale.pop, resource, None)

    def watching(self, resource: str) -> bool:
        """A watch of RESOURCE is open through the proxy now: what changes from here on, it carries."""
        return bool(self._watches.get(resource))

    def saw(self, resource: str, event_type: str, namespace: str, name: str) -> bool:
        """The proxy passed that watch event on to the operator."""
        return WatchEvent(resource, event_type, namespace, name) in list(self.watch_events)

    # -- the proxy's loop -------------------------------------------------------------------

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_tls(), limit=0),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Watches never end on their own: stopping waits a moment for them, not a minute.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        # The upstream session first: that ends every streaming watch, and with them their handlers.
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
        # A handler of a watch the operator still held outlives the runner's shutdown timeout: end it here.
        leftovers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    async def _open_gap(self, resource: str) -> None:
        self._gaps.add(resource)
        for transport in self._watches.get(resource, set()):
            transport.close()

    def _client_tls(self) -> ssl.SSLContext:
        """TLS to the API server as the admin the cluster's kubeconfig names."""
        config = yaml.safe_load(self.cluster.kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self._pki = tempfile.TemporaryDirectory(prefix="api-proxy-")
        pki = Path(self._pki.name)
        for name, key in (
            ("ca.crt", cluster["certificate-authority-data"]),
            ("client.crt", user["client-certificate-data"]),
            ("client.key", user["client-key-data"]),
        ):
            (pki / name).write_bytes(base64.b64decode(key))
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "client.crt", pki / "client.key")
        self._upstream = str(cluster["server"]).rstrip("/")
        return context

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        resource = collection_of(request.path)
        watching = request.query.get("watch") in ("1", "true")
        if resource is not None and watching and resource in self._gaps:
            return web.Response(body=json.dumps(GONE).encode() + b"\n", content_type="application/json")
        listing = resource is not None and request.method == "GET" and not watching
        stale = self._stale.get(resource or "")
        operators_own = not request.headers.get("User-Agent", "").startswith("kopf/")
        if listing and stale is not None and stale.body is not None and operators_own:
            self.stale_served[resource or ""] += 1
            return web.Response(body=stale.body, content_type="application/json")
        if listing and resource is not None:
            self.lists[resource] += 1
        return await self._forward(request, resource if watching else None, stale if operators_own else None)

    async def _forward(self, request: web.Request, watched: str | None, stale: _Stale | None) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Accept-Encoding"] = "identity"  # the watch events are read on the way
        # No body at all rather than an empty one: aiohttp labels b"" application/octet-stream,
        # which the API server refuses (415) even on a GET.
        body = await request.read() or None
        async with self._session.request(
            request.method, self._upstream + request.path_qs, headers=headers, data=body
        ) as upstream:
            if stale is not None and stale.body is None and upstream.status == 200:
                stale.body = await upstream.read()
                return web.Response(body=stale.body, content_type="application/json")
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await response.prepare(request)
            transport = request.transport
            if watched is not None and transport is not None:
                self._watches.setdefault(watched, set()).add(transport)
            try:
                await self._stream(upstream, response, watched)
            finally:
                if watched is not None and transport is not None:
                    self._watches.get(watched, set()).discard(transport)
            return response

    async def _stream(
        self, upstream: aiohttp.ClientResponse, response: web.StreamResponse, watched: str | None
    ) -> None:
        pending = b""
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientPayloadError):
            async for chunk in upstream.content.iter_any():
                if watched is not None and watched in self._gaps:
                    return  # cut: what the API server sends now never reaches the client
                if watched is not None:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    self._record(watched, lines)
                await response.write(chunk)
            await response.write_eof()

    def _record(self, resource: str, lines: list[bytes]) -> None:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            metadata = (event.get("object") or {}).get("metadata") or {}
            self.watch_events.append(
                WatchEvent(resource, event.get("type", ""), metadata.get("namespace", ""), metadata.get("name", ""))
            )
