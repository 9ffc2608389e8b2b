"""A stand-in model server for the InferenceService example: the endpoints a vLLM-style server
offers the operator and its users, with a toy "model" behind them.

    python3 server.py --port 8000 [--load-seconds 2]

- GET /health: 503 while the model loads, then 200 (the pod's readinessProbe; the operator
  counts a replica ready when its pod is).
- GET /metrics: Prometheus exposition with the series the operator's built-in autoscaling
  queries read (aisched.sources.prometheus.MetricNames): the counter `http_requests_total`
  (RequestsPerSecond) and the gauge `http_requests_in_flight` (Concurrency).
- POST /v1/completions: {"prompt": "...", "max_tokens": N} -> an OpenAI-shaped completion whose
  text is the prompt's words reversed, at most N of them.

Replace the image with a real server: vLLM's serves /health, /metrics and /v1/completions on
--port too; point the operator at its series names (AISCHED_AUTOSCALER__REQUEST_COUNTER=
vllm:request_success_total, AISCHED_AUTOSCALER__CONCURRENCY_GAUGE=vllm:num_requests_running).

Request bodies come from anyone who reaches the Service: their size is bounded and a body that is
not the expected JSON gets a 400, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

log = logging.getLogger("model-server")

MAX_BODY_BYTES = 64 * 1024
DRAIN_BYTES = 1024 * 1024
MAX_TOKENS = 256

REGISTRY = CollectorRegistry()
REQUESTS = Counter("http_requests", "Requests served, by path and status code.", ["path", "code"], registry=REGISTRY)
IN_FLIGHT = Gauge("http_requests_in_flight", "Requests being served now.", registry=REGISTRY)
LOADED = threading.Event()


class BadRequestError(ValueError):
    """What the client sent cannot be answered; the message says why."""


def complete(request: Any) -> dict[str, Any]:
    """The toy model: the prompt's words reversed, at most max_tokens of them."""
    if not isinstance(request, dict):
        raise BadRequestError("the body must be a JSON object")
    prompt = request.get("prompt")
    max_tokens = request.get("max_tokens", 16)
    if not isinstance(prompt, str):
        raise BadRequestError("prompt must be a string")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 0 < max_tokens <= MAX_TOKENS:
        raise BadRequestError(f"max_tokens must be an integer from 1 to {MAX_TOKENS}")
    words = prompt.split()[::-1][:max_tokens]
    return {
        "object": "text_completion",
        "model": "toy-reverser",
        "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "length"}],
        "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)},
    }


class Handler(BaseHTTPRequestHandler):
    server_version = "aisched-model-server"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/health":
            ready = LOADED.is_set()
            self._reply(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, b"ok\n" if ready else b"loading\n")
        elif self.path == "/metrics":
            self._reply(HTTPStatus.OK, generate_latest(REGISTRY), CONTENT_TYPE_LATEST, count=False)
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n")

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n")
            return
        # In flight while it is worked out; the gauge is down again before the client has its answer,
        # so a scrape right after the answer does not count it.
        with IN_FLIGHT.track_inprogress():
            status, body, content_type = self._completion()
        self._reply(status, body, content_type)

    def _completion(self) -> tuple[HTTPStatus, bytes, str]:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return HTTPStatus.LENGTH_REQUIRED, b"Content-Length required\n", "text/plain"
        if not 0 <= length <= MAX_BODY_BYTES:
            # Read (and drop) a body of modest size first: closing on unread data resets the
            # connection, and the client would see that instead of the 413.
            if 0 < length <= DRAIN_BYTES:
                self.rfile.read(length)
            self.close_connection = True
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY_BYTES} bytes\n".encode(), "text/plain"
        try:
            answer = complete(json.loads(self.rfile.read(length)))
        except (BadRequestError, ValueError) as error:  # json's errors are ValueErrors
            return HTTPStatus.BAD_REQUEST, json.dumps({"error": str(error)[:200]}).encode(), "text/plain"
        if not LOADED.is_set():
            return HTTPStatus.SERVICE_UNAVAILABLE, b"loading\n", "text/plain"
        return HTTPStatus.OK, json.dumps(answer).encode(), "application/json"

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = "text/plain", *, count: bool = True) -> None:
        if count and self.path != "/health":
            REQUESTS.labels(path=self.path if status != HTTPStatus.NOT_FOUND else "other", code=str(status.value)).inc()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--load-seconds", type=float, default=2.0, help="how long 'loading the model' takes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    server = ThreadingHTTPServer(("", args.port), Handler)
    server.daemon_threads = True
    # The kubelet's SIGTERM: stop accepting, finish, exit 0 (shutdown() must not run on the serving thread).
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())

    def load() -> None:
        time.sleep(args.load_seconds)
        LOADED.set()
        log.info("model loaded; serving on port %d", args.port)

    threading.Thread(target=load, daemon=True).start()
    log.info("loading the model (%.1fs)", args.load_seconds)
    server.serve_forever()
    server.server_close()
    log.info("stopped")


if __name__ == "__main__":
    main()
