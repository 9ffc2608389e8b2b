"""The operator inside a caller's process, for tests that stop and rebuild it at chosen moments.

`aisched run` (main.py) is the operator as users run it. This runs the same parts (controllers,
kopf handlers, relists) on the caller's event loop, against the same API server, without what
belongs to a process: health and metrics servers, leader election, collector and malloc tuning.
A test that kills it at every write of a path (tests/integration/test_kill_at_write.py) then pays
for a kopf start and a relist per kill point, not for a new interpreter importing everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry

from aisched.controller.main import Heartbeat, assemble, kube_client
from aisched.controller.training import TrainingJobController
from aisched.metrics import Metrics
from aisched.settings import Settings


def login_as(configuration: Configuration) -> Callable[..., kopf.ConnectionInfo]:
    """kopf's credentials, those of CONFIGURATION (as kopf.login_via_client reads the default one)."""

    def login(**_: Any) -> kopf.ConnectionInfo:
        header = configuration.get_api_key_with_prefix("BearerToken") or configuration.get_api_key_with_prefix(
            "authorization"
        )
        scheme, _space, token = (header or "").rpartition(" ")
        return kopf.ConnectionInfo(
            server=configuration.host,
            ca_path=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            scheme=scheme or None,
            token=token or None,
            certificate_path=configuration.cert_file,
            private_key_path=configuration.key_file,
        )

    return login


async def operate(
    settings: Settings,
    api_client: ApiClient,
    *,
    stop_flag: asyncio.Event,
    before_write: Callable[[Callable[..., Any], tuple[Any, ...]], None] | None = None,
    built: Callable[[TrainingJobController], None] | None = None,
) -> None:
    """Run the operator on this loop until STOP_FLAG is set or the task is cancelled."""
    kube = kube_client(settings, api_client, before_write=before_write)
    try:
        registry = assemble(
            settings,
            kube,
            Metrics(CollectorRegistry()),
            Heartbeat(settings.liveness_pass_seconds),
            login=login_as(api_client.configuration),
            built=built,
        )
        await kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=True,
            stop_flag=stop_flag,
        )
    finally:
        kube.close(wait=True)  # its calls end within their request timeout
