"""A real HTTP server on 127.0.0.1 that answers what a test scripts, and records what it was asked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest


@dataclass(frozen=True)
class Reply:
    """One scripted answer: JSON (dict/list), raw text or bytes; optionally late, or dripped."""

    body: Any = None
    status: int = 200
    delay_s: float = 0.0
    drip_s: float = 0.0
    """Seconds between the body's bytes: each read gets something in time, the whole never does."""
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode(), "text/html"
        return json.dumps(self.body).encode(), "application/json"


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


class ScriptedServer:
    """Replies per path in order; the last reply for a path repeats. Unknown paths get 404."""

    def __init__(self) -> None:
        self._replies: dict[str, list[Reply]] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self.release = threading.Event()  # set at teardown so late replies stop waiting
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                self._answer(parts.path, parts.query)

            def do_POST(self) -> None:
                # A form body (Prometheus's instant queries go by POST) is recorded as the query.
                form = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                self._answer(urlsplit(self.path).path, form)

            def _answer(self, path: str, raw_query: str) -> None:
                query = {k: v[-1] for k, v in parse_qs(raw_query).items()}
                reply = server._take(Request(path, query, {k.lower(): v for k, v in self.headers.items()}))
                if reply.delay_s:
                    server.release.wait(reply.delay_s)
                body, content_type = reply.encoded()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if not reply.drip_s:
                        self.wfile.write(body)
                    for index in range(len(body) if reply.drip_s else 0):
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                        if server.release.wait(reply.drip_s):
                            break
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._http.block_on_close = False
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        # A short poll keeps shutdown (once per test) quick.
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.02,), daemon=True)

    def reply(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self._replies[path] = list(replies)

    def asked(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _take(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            queue = self._replies.get(request.path)
            if not queue:
                return Reply({"error": f"no route {request.path}"}, status=404)
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer()
    scripted.start()
    try:
        yield scripted
    finally:
        scripted.stop()
