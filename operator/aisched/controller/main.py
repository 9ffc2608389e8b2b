"""Start the operator: health endpoint, leader election, then kopf with our handlers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import kopf
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from aisched.controller.cluster_state import ClusterState
from aisched.controller.collector_pacing import CollectorPacing
from aisched.controller.cycle import ReplicaAsksKind, SchedulingCycle
from aisched.controller.handlers import register
from aisched.controller.process_tuning import trim_heap_forever, tune_process, use_system_allocator
from aisched.controller.provisioning import NodeProvisioner
from aisched.controller.relist import relist, sync_caches
from aisched.controller.serving import InferenceServiceController
from aisched.controller.training import TrainingJobController
from aisched.controller.workloads.controller import WorkloadController
from aisched.controller.workloads.deferral import WorkloadDeferral
from aisched.kube.client import KubeClient, load_api_client
from aisched.kube.inventory import Inventory
from aisched.kube.leader import KubeLeaseStore, LeaseElector
from aisched.kube.write_hooks import write_killer
from aisched.metrics import Metrics, serve
from aisched.settings import AutoscalerSettings, Settings
from aisched.sources.carbon import build_carbon_source
from aisched.sources.energy import GpuEnergySource
from aisched.sources.prometheus import MetricNames, PrometheusSource

log = logging.getLogger(__name__)
HEARTBEAT_STALE_SECONDS = 60.0
# Objects per page of the lists kopf makes when a watch (re)starts, the most it holds parsed at once:
# 8 of the largest TrainingJobs the CRD admits are 160 MiB parsed (16 were 320 MiB, a third of the
# chart's limit); 100,000 pods are 12,500 pages, served from the API server's cache.
WATCH_PAGE = 8
# How long the relist after start-up waits for the pod watch's first event, in a cluster with no pod to send one.
WATCH_SETTLE_SECONDS = 30
# How long kopf's worker for one object waits for its next event before it ends (kopf's default:
# 5 s). Waiting, it still holds the last event's body: a restart's first list of TrainingJobs
# (a few pages a second, up to 20 MiB each parsed) was held whole, 848 MiB for 48 of them; ended
# at once, only the page being handled is. A busy object's worker is made again at its next
# event: a task, tens of microseconds. Positive: kopf's wait for the next event with no timeout
# left at all (Python 3.11's wait_for) never takes one.
WORKER_IDLE_SECONDS = 0.01


class Heartbeat:
    """What /healthz answers: the event loop ticks, and the reconcile loop completes passes.

    The loop's tick catches a blocked event loop; the passes catch a reconcile loop stuck inside
    a pass (a call without a deadline, a deadlock) while the event loop still turns. A standby
    runs no passes and is judged by its ticks alone until its controllers start.
    """

    def __init__(self, pass_bound_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()
        self.pass_bound_seconds = pass_bound_seconds
        self.last_pass: float | None = None

    def healthy(self) -> bool:
        now = self.clock()
        if now - self.last >= HEARTBEAT_STALE_SECONDS:
            return False
        return self.last_pass is None or now - self.last_pass < self.pass_bound_seconds

    def pass_completed(self) -> None:
        """Also called once as the controllers start: the first pass is due within the bound from then."""
        self.last_pass = self.clock()

    async def tick_forever(self) -> None:
        while True:
            self.last = self.clock()
            await asyncio.sleep(5)


def _serve_health(address: str, port: int, heartbeat: Heartbeat) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path.startswith("/healthz") and heartbeat.healthy()
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if ok else b"unhealthy\n")

        def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: keep quiet
            return

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server


def replica_identity() -> str:
    """This process's name in the leader Lease.

    The host name alone (the pod's name in a cluster) is shared by replicas on host networking or
    on one machine, and each would take the other's lease for its own; the random suffix, as
    client-go's components add, keeps every process distinct.
    """
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class _NoDiffBase(kopf.DiffBaseStorage):
    """Keeps nothing: every handler of ours is an event handler, which never reads the
    "last handled" state kopf keeps for change handlers, and building that state deep-copies
    each object of each watch event (a sixth of the operator's CPU under a burst of jobs)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _configure_kopf(settings: kopf.OperatorSettings, page_size: int) -> None:
    # kopf's own bookkeeping, were a change handler ever added, lives under our group.
    settings.persistence.finalizer = "aisched.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="aisched.io")
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    # A watch that falls behind the API server's window (a loop held up for a minute) lists again:
    # ten thousand jobs or pods in one JSON document were hundreds of MiB at once, so page it. Each
    # page is parsed whole, and queued whole before the handlers take it: a TrainingJob may be
    # 1.5 MiB of JSON and 20 MiB parsed (benchmarks/tenant_objects.py), so a page of 500 at a
    # restart was 10 GiB. kopf pages every kind alike: pods too are listed WATCH_PAGE at a time.
    settings.watching.chunk_size = min(page_size, WATCH_PAGE)
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS


async def _operate(settings: Settings, standalone: bool) -> int:
    heartbeat = Heartbeat(settings.liveness_pass_seconds)
    asyncio.get_running_loop().create_task(heartbeat.tick_forever())
    _serve_health(settings.health_address, settings.health_port, heartbeat)
    metrics = Metrics(CollectorRegistry(), topology_levels=settings.topology.resolved().names)
    CollectorPacing(metrics.process.record_gc_pause).install()
    serve(metrics, settings.metrics_port, settings.metrics_address)
    metrics.record_leadership(False)
    api_client = load_api_client()
    elector = _elector(settings, api_client) if settings.leader_election and not standalone else None
    kube = kube_client(
        settings,
        api_client,
        fence=elector.may_write if elector is not None else None,
        before_write=write_killer(settings.test_exit_at_write) if settings.test_exit_at_write else None,
    )
    if elector is not None:
        await elector.acquire()
    metrics.record_leadership(True)
    if elector is not None:
        metrics.follow_leadership(elector.may_write)
    registry = assemble(settings, kube, metrics, heartbeat, login=kopf.login_via_client)
    code = await _run_kopf(registry, settings, elector)
    metrics.record_leadership(False)
    return code


def kube_client(
    settings: Settings,
    api_client: ApiClient,
    *,
    fence: Callable[[], bool] | None = None,
    before_write: Callable[[Callable[..., Any], tuple[Any, ...]], None] | None = None,
) -> KubeClient:
    return KubeClient(
        api_client,
        events_per_second=settings.events_per_second,
        event_burst=settings.event_burst,
        request_timeout_seconds=settings.api_request_timeout_seconds,
        fence=fence,
        qps=settings.api_qps,
        burst=settings.api_burst,
        before_write=before_write,
    )


def assemble(
    settings: Settings,
    kube: KubeClient,
    metrics: Metrics,
    heartbeat: Heartbeat,
    *,
    login: Callable[..., kopf.ConnectionInfo | None],
    built: Callable[[TrainingJobController], None] | None = None,
) -> kopf.OperatorRegistry:
    """The controllers, and the kopf registry that feeds and runs them: the operator but its process
    (health and metrics servers, leader election), so that tests can also build it in theirs
    (BUILT: told of the training controller, whose caches a test may wait on)."""
    inventory = Inventory(settings)
    state = ClusterState(inventory)  # no controller's: each kind's decides from it, and counts its own in it
    carbon_client = httpx.AsyncClient()
    carbon = build_carbon_source(settings.carbon, carbon_client)  # one cache and breaker for every kind's reads
    provisioner = NodeProvisioner.from_settings(settings, kube, inventory) if settings.provisioning.enabled else None
    jobs = TrainingJobController(
        settings,
        kube,
        state,
        metrics=metrics,
        carbon=carbon,
        energy=_gpu_energy(settings),
        provisioner=provisioner,
    )
    serving = InferenceServiceController(
        settings,
        kube,
        inventory,
        cluster_snapshot=state.snapshot,
        in_flight=state.in_flight,
        shares=state.shares,  # one record of the GPU shares handed out, as of the GPUs promised
        prometheus=_prometheus(settings.autoscaler),
        metrics=metrics,
        queues=state.queues,  # one watch of Queues; the tenancy of replicas is read from it too
        replica_asks=state.replica_asks,  # new replicas are decided in the scheduling cycle, with the gangs
        closing=state.closing,  # one record of namespaces being deleted
    )
    # One quota per queue, whatever kind of work holds it: the cycle charges the replicas.
    state.charged_from(serving.gpus_held)
    # Every other kind (Jobs, PyTorchJobs, RayClusters, model-server Deployments, pod groups) is decided
    # in the same cycle, charged to the same queues, and its admitted pods hold GPUs in the same snapshot.
    workloads = WorkloadController(
        kube,
        state,
        queue_object=state.queue_object,
        wake_cycle=state.wake_cycle,
        metrics=metrics.workload,
        pods_ready_seconds=settings.workload_pods_ready_seconds,
        kinds=frozenset(settings.workload_kinds),
        deferral=WorkloadDeferral(carbon, settings.carbon, metrics=metrics.carbon),
    )
    # One cycle decides every kind, in this order: the services' replicas are promised first, then the
    # TrainingJobs' part is carried out, then the other kinds'. The training loop's passes drive it.
    jobs.drives(
        SchedulingCycle(
            settings=settings,
            state=state,
            kinds=(ReplicaAsksKind(state.replica_asks), jobs.cycle_kind, workloads.cycle),
            kube=kube,
            metrics=metrics,
            provisioner=provisioner,
            clock=jobs.now,
        )
    )
    if built is not None:
        built(jobs)
    return _kopf_registry(
        settings,
        kube,
        jobs=jobs,
        serving=serving,
        workloads=workloads,
        carbon_client=carbon_client,
        heartbeat=heartbeat,
        login=login,
    )


def _elector(settings: Settings, api_client: ApiClient) -> LeaseElector:
    """The leader election of this replica; its `may_write` fences every write of the KubeClient."""
    store = KubeLeaseStore(
        api_client,
        settings.leader_namespace,
        settings.leader_lease_name,
        request_timeout_seconds=settings.leader_renew_deadline_seconds,
    )
    return LeaseElector(
        store,
        replica_identity(),
        lease_seconds=settings.leader_lease_seconds,
        renew_deadline_seconds=settings.leader_renew_deadline_seconds,
        retry_seconds=settings.leader_retry_seconds,
    )


def _kopf_registry(
    operator_settings: Settings,
    kube: KubeClient,
    *,
    jobs: TrainingJobController,
    serving: InferenceServiceController,
    workloads: WorkloadController,
    carbon_client: httpx.AsyncClient,
    heartbeat: Heartbeat,
    login: Callable[..., kopf.ConnectionInfo | None],
) -> kopf.OperatorRegistry:
    """Our handlers, and the hooks that fill the caches and run the controllers once kopf starts."""
    registry = kopf.OperatorRegistry()
    inventory = jobs.inventory
    pods_watched = asyncio.Event()
    register(registry, inventory, jobs, serving, pods_watched=pods_watched, workloads=workloads)
    background: list[asyncio.Task[None]] = []

    @kopf.on.login(registry=registry)
    def credentials(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # Same credentials as our own client: in-cluster service account, else kubeconfig.
        return login(**kwargs)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: object) -> None:
        _configure_kopf(settings, operator_settings.list_page_size)
        # No loop starts before every cache it decides from has listed.
        page_size = operator_settings.list_page_size
        await sync_caches(
            kube,
            inventory,
            jobs,
            serving,
            page_size=page_size,
            object_page_size=min(page_size, WATCH_PAGE),
            workloads=workloads,
        )
        heartbeat.pass_completed()
        background.append(asyncio.create_task(jobs.run(on_pass=heartbeat.pass_completed), name="trainingjobs"))
        background.append(asyncio.create_task(serving.run(), name="inferenceservices"))
        background.append(asyncio.create_task(workloads.run(), name="workload-pods"))
        background.append(asyncio.create_task(_relist_once_watching(), name="relist-once-watching"))
        background.append(asyncio.create_task(_relist_forever(), name="relist"))
        background.append(asyncio.create_task(kube.send_events(), name="events"))
        background.append(asyncio.create_task(jobs.shares.mig.run(kube), name="mig-repartitions"))
        background.append(asyncio.create_task(trim_heap_forever(), name="heap-trim"))

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: object) -> None:
        if jobs.carbon is not None:
            await jobs.carbon.aclose()  # fetches beside the loop
        await carbon_client.aclose()
        for task in background:
            task.cancel()
        if serving.prometheus is not None:
            await serving.prometheus.aclose()

    async def _relist_once_watching() -> None:
        # The loops start on the start-up lists, before kopf's pod watch has listed: a pod that goes
        # between the two (a worker whose finalizer the first reconcile let go) is in neither the
        # watch's list nor a DELETED event, and would be held until the next relist, a period away.
        # One relist once the watch streams (or a settle time, with no pod to tell) closes the gap.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pods_watched.wait(), timeout=WATCH_SETTLE_SECONDS)
        try:
            await relist(
                kube, inventory, jobs, serving, page_size=operator_settings.list_page_size, workloads=workloads
            )
        except Exception:
            log.exception("relisting nodes and pods after the watches started failed; the periodic relist repairs it")

    async def _relist_forever() -> None:
        while True:
            await asyncio.sleep(operator_settings.relist_seconds)
            try:
                await relist(
                    kube, inventory, jobs, serving, page_size=operator_settings.list_page_size, workloads=workloads
                )
            except Exception:
                log.exception("relisting nodes and pods failed; the watches keep going")

    return registry


async def _run_kopf(registry: kopf.OperatorRegistry, settings: Settings, elector: LeaseElector | None) -> int:
    """Run kopf until it ends (0), or, under leader election, until the lease is lost (1)."""
    stop_flag = asyncio.Event()

    @kopf.on.cleanup(registry=registry)
    async def let_the_flag_go(**_: object) -> None:
        # kopf waits on the flag in a task of its own: left unset when a signal stops it, that task
        # held every exit up for kopf's 5 s of grace to stray tasks (a test run restarts it ~20 times).
        stop_flag.set()

    kopf_task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=True,  # leader election, not kopf peering, keeps replicas apart
            stop_flag=stop_flag,
        )
    )
    if elector is None:
        await kopf_task
        return 0
    renew_task = asyncio.create_task(elector.keep_renewing())
    done, _ = await asyncio.wait({kopf_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
    if renew_task in done:
        stop_flag.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(kopf_task, timeout=30)
        return 1  # restart as a standby rather than act without the lease
    renew_task.cancel()
    await elector.release()
    return 0


def _gpu_energy(settings: Settings) -> GpuEnergySource | None:
    carbon = settings.carbon
    if carbon.dcgm_prometheus_url is None:
        return None
    return GpuEnergySource(
        PrometheusSource(carbon.dcgm_prometheus_url, timeout_seconds=carbon.timeout_seconds),
        counter=carbon.dcgm_energy_counter,
        namespace_label=settings.autoscaler.gpu_namespace_label,
        pod_label=settings.autoscaler.gpu_pod_label,
    )


def _prometheus(settings: AutoscalerSettings) -> PrometheusSource | None:
    if settings.prometheus_url is None:
        return None
    names = MetricNames(
        request_counter=settings.request_counter,
        concurrency_gauge=settings.concurrency_gauge,
        gpu_utilization=settings.gpu_utilization,
        rate_window=settings.rate_window,
        namespace_label=settings.namespace_label,
        pod_label=settings.pod_label,
        gpu_namespace_label=settings.gpu_namespace_label,
        gpu_pod_label=settings.gpu_pod_label,
    )
    return PrometheusSource(settings.prometheus_url, timeout_seconds=settings.query_timeout_seconds, names=names)


def run_operator(settings: Settings, *, standalone: bool = False) -> int:
    use_system_allocator()  # first: it starts the process again, which checks its settings again
    tune_process()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        # kopf says "Handler ... succeeded" at INFO for every watch event: on a busy cluster,
        # thousands of lines a second that tell nothing. Its warnings and errors still show.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    return asyncio.run(_operate(settings, standalone))
