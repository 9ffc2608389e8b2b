"""Every TrainingJob the CRD admits goes through the scheduling cycle's pure path without raising.

The path is the one `controller/training` takes for a job, function by function: parse,
carbon planning, capacity, the scheduler's request, `schedule()`, the checkpoint interval
and deadline slack, the status written and its wire form, the worker pods, chunk ends,
emissions, the reporting figures and the lifecycle. The objects come from `tests.extremes`
(the edges the schema may admit); what the generated CRD refuses, the model must refuse too.

Each crash this found is kept below as an explicit example, with what it raised and where
(before the schema bounds and the saturating time arithmetic).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from pydantic import ValidationError

from aisched.api import CapacityType, SpotPolicy, TrainingJob
from aisched.api.crd import all_crds
from aisched.controller.training import TrainingJobController
from aisched.controller.training.store import finished
from aisched.kube.builders import GangLaunch, WorkerSlot, build_headless_service, build_worker_pod
from aisched.kube.inventory import Inventory
from aisched.policy.carbon import (
    CarbonPlan,
    DeferrableJob,
    Forecast,
    PlanOptions,
    at_chunk_end,
    current_chunk_end,
    grams_from_joules,
    plan_start,
    work_in_chunk,
    work_left,
)
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.deadlines import deadline_slack_seconds
from aisched.policy.job_messages import admitted_message, deferred_message
from aisched.policy.job_status import (
    PENDING_PHASES,
    apply_step,
    deferred,
    placed,
    queued,
    with_chunk_end,
    with_emissions,
)
from aisched.policy.level_refusals import (
    TOPOLOGY_LEVEL_NOT_LABELLED,
    TOPOLOGY_LEVELS_OUT_OF_ORDER,
    UNKNOWN_TOPOLOGY_LEVEL,
)
from aisched.policy.lifecycle import Observation, next_step
from aisched.policy.placement import Placement, place_gang
from aisched.policy.scheduler import JobRequest, schedule
from aisched.policy.spot import CapacityChoice, SpotJob, choose_capacity, spot_checkpoint_interval
from aisched.settings import Settings
from tests.builders import DEFAULT_TEMPLATE, a_training_job
from tests.extremes import INT64_MAX, extreme_training_jobs
from tests.unit.api.server_like import server_rejections
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_isolation import a_placed_job, status_of
from tests.unit.controller.test_training_loop import T0, a_controller, a_node

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = Settings()
CRD = next(crd for crd in all_crds() if crd["spec"]["names"]["kind"] == "TrainingJob")
DNS_LABEL_MAX = 63  # a pod's hostname and subdomain, a Service's name, a label value
DNS_SUBDOMAIN_MAX = 253  # a pod's name


def a_job(name: str = "j", *, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A TrainingJob object as the API server hands it over (uid, generation, creation time)."""
    builder = a_training_job(name).namespace("ns")
    for path, value in spec.items():
        builder.set(path.replace("__", "."), value)
    obj = builder.obj()
    obj["metadata"].update(uid=f"uid-{name}", generation=1, creationTimestamp=NOW.isoformat())
    if status is not None:
        obj["status"] = status
    return obj


def with_template(**spec: Any) -> dict[str, Any]:
    """DEFAULT_TEMPLATE with SPEC merged into its pod spec (and `container` into its container)."""
    container = {**DEFAULT_TEMPLATE["spec"]["containers"][0], **spec.pop("container", {})}
    metadata = spec.pop("metadata", None)
    template: dict[str, Any] = {"spec": {"containers": [container], **spec}}
    if metadata is not None:
        template["metadata"] = metadata
    return template


# What each crash raised, and where, before this was fixed. Those the schema now refuses
# are kept out by the API server; the others the operator takes.
CRASHES: dict[str, dict[str, Any]] = {
    # Model refused what the CRD admitted: the job was silently never scheduled.
    "container with an empty name": a_job(template=with_template(container={"name": ""})),
    # AttributeError in kube/builders.py _with_env (the gang's pods were never created).
    "env entry that is not an object": a_job(template=with_template(container={"env": [[]]})),
    # TypeError in kube/builders.py _with_env.
    "env that is null": a_job(template=with_template(container={"env": None})),
    # AttributeError in kube/builders.py _request_gpus.
    "resources that are a list": a_job(template=with_template(container={"resources": []})),
    # AttributeError in policy/cluster.py Toleration.from_dict, from JobRequest.from_training_job:
    # the scheduling cycle raised, every cycle, for every job.
    "toleration that is a string": a_job(template=with_template(tolerations=["", ""])),
    # ValueError in policy/cluster.py Toleration.from_dict (the cycle again).
    "toleration with an unknown operator": a_job(template=with_template(tolerations=[{"operator": "Sometimes"}])),
    "toleration with an unknown effect": a_job(template=with_template(tolerations=[{"effect": "Never"}])),
    # TypeError in policy/scheduler/jobs.py JobRequest.from_training_job (the cycle again).
    "tolerations that are a number": a_job(template=with_template(tolerations=INT64_MAX)),
    # TypeError in kube/builders.py build_worker_pod.
    "node selector that is a string": a_job(template=with_template(nodeSelector="1e3")),
    "template labels that are a string": a_job(template=with_template(metadata={"labels": "1.5"})),
    # The API server refuses the pods (labels and annotations are maps of strings): the gang never starts.
    "template annotations that are a string": a_job(template=with_template(metadata={"annotations": "-1"})),
    "template label that is not a string": a_job(template=with_template(metadata={"labels": {"team": False}})),
    # Names the API server refuses for the host names and the headless Service: the gang never starts.
    "name with a dot": a_job("ranks.v2"),
    "name starting with a digit": a_job("9" * 48),
    # A gpuType no node label can hold: the job waits for ever.
    "GPU type longer than a label value": a_job(gpuType="x" * 64),
    # OverflowError in policy/scheduler/jobs.py JobRequest.from_training_job (the cycle).
    "expected duration of 2**53 seconds": a_job(expectedDurationSeconds=2**53 + 1),
    # OverflowError in policy/scheduler/state.py CycleState.admit, inside schedule() (the cycle).
    "expected duration of 17,000 years": a_job(expectedDurationSeconds=533_811_011_819),
    # OverflowError in policy/lifecycle.py _active_deadline (its reconcile, every pass).
    "active deadline at int64's maximum": a_job(
        status={"phase": "Running", "startTime": NOW.isoformat(), "placement": {"nodes": ["n1"]}},
        runPolicy={"activeDeadlineSeconds": INT64_MAX},
    ),
    # ValueError "a deferrable job needs a deadline or a maximum delay" in policy/carbon/plan.py
    # latest_start: the controller took maxDelaySeconds 0 for none (the cycle).
    "max delay of 0": a_job(carbon={"deferrable": True, "maxDelaySeconds": 0}, expectedDurationSeconds=3600),
    # OverflowError in policy/carbon/chunk_ends.py work_left (the cycle).
    "work done of 1e18 seconds": a_job(
        status={"phase": "Deferred", "chunkWorkDoneSeconds": 1e18},
        carbon={"deferrable": True, "interruptible": True, "maxDelaySeconds": 3600},
        checkpoint={"path": "/ckpt"},
        expectedDurationSeconds=3600,
    ),
    # OverflowError in policy/carbon/plan.py latest_start, deadline - duration (the cycle).
    "deadline in year 1": a_job(
        carbon={"deferrable": True}, deadline="0001-01-01T00:00:00Z", expectedDurationSeconds=3600
    ),
    # OverflowError in policy/scheduler/state.py CycleState, start + duration (the cycle).
    "gang started in year 9999": a_job(
        status={"phase": "Running", "startTime": "9999-12-31T23:59:59Z", "placement": {"nodes": ["n1"]}},
        expectedDurationSeconds=3600,
    ),
    # OverflowError in policy/lifecycle.py _after_finish, completion + TTL (its reconcile).
    "finished in year 9999 with a TTL": a_job(
        status={"phase": "Succeeded", "completionTime": "9999-12-31T23:59:59Z"},
        runPolicy={"ttlSecondsAfterFinished": 86400},
    ),
}


def _cluster() -> ClusterSnapshot:
    inventory = Inventory(SETTINGS)
    for name, spot in (("n1", False), ("n2", False), ("n3", True)):
        labels = {"karpenter.sh/capacity-type": "spot"} if spot else {}
        inventory.upsert_node(
            {
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    return inventory.snapshot()


def _plan(obj: dict[str, Any], job: TrainingJob, work: timedelta, *, running: bool, paused: bool) -> CarbonPlan:
    """carbon.CarbonDeferral._carbon_plan, against a forecast that is dirty for an hour."""
    spec = job.spec
    forecast = Forecast("region", NOW, timedelta(minutes=30), tuple(500.0 if i < 2 else 50.0 for i in range(96)))
    deferrable = DeferrableJob(
        work,
        power_w=SETTINGS.carbon.power_per_gpu(spec.gpu_type) * spec.total_gpus,
        deadline=spec.deadline,
        max_delay=timedelta(seconds=spec.carbon.max_delay_seconds)
        if spec.carbon.max_delay_seconds is not None
        else None,
        submitted_at=datetime.fromisoformat(obj["metadata"]["creationTimestamp"]),
        running=running,
        paused=paused,
    )
    options = PlanOptions(
        interruptible=spec.carbon.interruptible,
        threshold_grams_per_kwh=spec.carbon.threshold_grams_per_kwh if spec.carbon.mode == "Threshold" else None,
        min_chunk=timedelta(seconds=SETTINGS.carbon.min_chunk_seconds),
        chunk_overhead=timedelta(seconds=SETTINGS.restart_overhead_seconds),
    )
    return plan_start(forecast, NOW, deferrable, options)


def _written(obj: dict[str, Any], wire: dict[str, Any]) -> None:
    """A status the controller writes is one the CRD admits and the model reads back."""
    written = {**obj, "status": wire}
    assert server_rejections(CRD, written) == [], wire
    TrainingJob.model_validate(written)


def _pending_request(obj: dict[str, Any], job: TrainingJob, snapshot: ClusterSnapshot) -> JobRequest | None:
    """carbon.CarbonDeferral.defer, then cycle_kind.TrainingCycleKind._enter_cycle for a pending job."""
    spec, status = job.spec, job.status
    paused = status.chunk_work_done_seconds is not None
    if spec.carbon.deferrable and (status.start_time is None or paused):
        work = work_left(timedelta(seconds=spec.expected_duration_seconds or 0), status.chunk_work_done_seconds)
        if work is not None:
            plan = _plan(obj, job, work, running=False, paused=paused)
            deferred_message(plan)
            _written(
                obj, with_chunk_end(deferred(job, plan, NOW, paused=paused), current_chunk_end(plan, NOW)).to_wire()
            )
            if plan.is_deferred(NOW):
                return None
    spot_request = JobRequest.from_training_job(job, capacity_types=(CapacityType.SPOT,))
    capacity = choose_capacity(
        SpotPolicy(spec.spot.policy),
        SpotJob(
            remaining_work_s=float(spec.expected_duration_seconds or 0),
            restart_overhead_s=SETTINGS.restart_overhead_seconds,
        ),
        now=NOW,
        deadline=spec.deadline,
        spot_available=isinstance(place_gang(spot_request.gang(spec.replicas, None, frozenset()), snapshot), Placement),
        decision_period_s=SETTINGS.resync_seconds,
    )
    if capacity.choice == CapacityChoice.WAIT:
        _written(obj, queued(job, capacity.reason, capacity.message, NOW).to_wire())
        return None
    types = (CapacityType.SPOT,) if capacity.choice == CapacityChoice.SPOT else (CapacityType.ON_DEMAND,)
    return JobRequest.from_training_job(job, capacity_types=types)


def _launch(obj: dict[str, Any], job: TrainingJob, placement: Placement, message: str) -> None:
    """decisions.CycleDecisions.launch and _checkpoint_interval, then reconcile's _create_workers."""
    spec, status = job.spec, job.status
    interval = None
    if spec.checkpoint is not None:
        slack = None
        if spec.deadline is not None:
            work = float(spec.expected_duration_seconds or 0)
            overheads = (SETTINGS.restart_overhead_seconds, SETTINGS.resync_seconds)
            slack = deadline_slack_seconds(spec.deadline, NOW, work, *overheads)
        interval = spec.checkpoint.interval_seconds or round(
            spot_checkpoint_interval(
                spec.checkpoint.cost_seconds,
                1e-4,
                notice_s=SETTINGS.spot_notice_seconds,
                interruptions=status.interruptions or 0,
                saved_on_notice=min(status.saved_on_notice or 0, status.interruptions or 0),
                slack_s=slack,
            )
        )
    updated = placed(
        job,
        placement,
        reason="Admitted",
        message=message,
        selector="aisched.io/job-name=j",
        checkpoint_interval_seconds=interval,
        capacity=None,
        now=NOW,
    )
    _written(obj, updated.to_wire())
    assert updated.placement is not None
    launch = GangLaunch(
        generation=updated.gang_generation or 0,
        world_size=len(updated.placement.nodes),
        slots=tuple(WorkerSlot(rank, node) for rank, node in enumerate(updated.placement.nodes)),
        checkpoint_interval_seconds=interval,
    )
    pods = [build_worker_pod(job, launch, slot) for slot in launch.slots]
    service = build_headless_service(job)
    # What the API server checks of the names and labels of what the operator creates.
    name = service["metadata"]["name"]
    assert len(name) <= DNS_LABEL_MAX and name[0].isalpha() and "." not in name
    for pod in pods:
        assert len(pod["spec"]["hostname"]) <= DNS_LABEL_MAX and "." not in pod["spec"]["hostname"]
        assert len(pod["metadata"]["name"]) <= DNS_SUBDOMAIN_MAX
        for value in pod["metadata"]["labels"].values():
            assert isinstance(value, str) and len(value) <= DNS_LABEL_MAX


def _end_chunk(obj: dict[str, Any], job: TrainingJob) -> None:
    """carbon.CarbonDeferral._end_chunk for a running gang whose chunk is over."""
    status = job.status
    running = next((c for c in status.conditions if c.type == "Running" and c.status == "True"), None)
    done = (status.chunk_work_done_seconds or 0.0) + work_in_chunk(
        (running.last_transition_time if running else None) or NOW,
        NOW,
        resumed=status.chunk_work_done_seconds is not None,
        restore=timedelta(seconds=SETTINGS.restart_overhead_seconds),
    )
    work = work_left(timedelta(seconds=job.spec.expected_duration_seconds or 0), done)
    plan = _plan(obj, job, work, running=True, paused=False) if work is not None else None
    _written(obj, with_chunk_end(status, at_chunk_end(plan, NOW).until).to_wire())


def drive_cycle_path(obj: dict[str, Any]) -> None:
    """One job through what a pass of the controller does with it; raises where the pass would."""
    job = TrainingJob.model_validate(obj)
    spec, status = job.spec, job.status
    snapshot = _cluster()
    plain = JobRequest.from_training_job(
        TrainingJob.model_validate(a_job("plain")), capacity_types=(CapacityType.ON_DEMAND,)
    )
    request = None
    if status.phase in PENDING_PHASES and not spec.suspend:
        request = _pending_request(obj, job, snapshot)
    elif status.phase in ("Placing", "Running") and status.placement and status.placement.nodes:
        running_on = Placement.of_nodes(status.placement.nodes, spec.gpus_per_replica, snapshot)
        request = JobRequest.from_training_job(
            job, capacity_types=(running_on.capacity_type or CapacityType.ON_DEMAND,), placement=running_on
        )
    result = schedule(snapshot, [plain] if request is None else [request, plain], [], NOW)
    for admission in result.admitted:
        if admission.key == "ns/" + job.metadata["name"]:
            _launch(
                obj,
                job,
                admission.placement,
                admitted_message(admission.placement, admission.preempting, admission.key),
            )
    for waiting in result.waiting:
        if waiting.key == "ns/" + job.metadata["name"]:
            _written(obj, queued(job, waiting.reason, waiting.message, NOW).to_wire())
    if status.phase == "Running" and status.chunk_end is not None and spec.carbon.deferrable:
        _end_chunk(obj, job)
    grams = grams_from_joules(SETTINGS.carbon.power_per_gpu(spec.gpu_type) * (status.gpus or 0) * 60.0, 500.0)
    _written(obj, with_emissions(status, grams).to_wire())
    if spec.deadline is not None:  # reporting.Reporting._report_job's gauge
        deadline_slack_seconds(spec.deadline, NOW, float(spec.expected_duration_seconds or 0))
    step = next_step(spec, status, Observation(now=NOW, workers=()))
    _written(obj, apply_step(job, status, step, NOW).to_wire())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=extreme_training_jobs())
@example(obj=a_job())
def test_every_job_the_crd_admits_goes_through_a_pass(obj: dict[str, Any]) -> None:
    if server_rejections(CRD, obj):
        # The API server keeps it out; the model must not read it either, or the two disagree.
        with pytest.raises(ValidationError):
            TrainingJob.model_validate(obj)
        return
    try:
        TrainingJob.model_validate(obj)
    except ValidationError as error:
        pytest.fail(f"the CRD admits what the model refuses: {error}")
    drive_cycle_path(obj)


for _name, _obj in CRASHES.items():
    test_every_job_the_crd_admits_goes_through_a_pass = example(obj=_obj).via(_name)(
        test_every_job_the_crd_admits_goes_through_a_pass
    )


SCHEMA_REFUSES = {
    name
    for name in CRASHES
    if name
    not in {
        "max delay of 0",
        "work done of 1e18 seconds",
        "deadline in year 1",
        "gang started in year 9999",
        "finished in year 9999 with a TTL",
    }
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_each_crash_found_is_kept_out_by_the_schema_or_taken_by_the_operator(name: str) -> None:
    obj = CRASHES[name]
    assert bool(server_rejections(CRD, obj)) == (name in SCHEMA_REFUSES)
    if name not in SCHEMA_REFUSES:
        drive_cycle_path(obj)


async def _pass_with(obj: dict[str, Any]) -> tuple[TrainingJobController, KubeDouble]:
    """One pass of every cluster-wide stage over OBJ and a plain job, each stage called so that it may raise."""
    kube = KubeDouble().allow("patch_status", "post_event", "create", "delete_pod", "release_scheduling_gates")
    controller = a_controller(kube, carbon=True)
    for name in ("n1", "n2", "spare"):
        controller.inventory.upsert_node(a_node(name, 8))
    controller.job_seen(obj)
    controller.job_seen(a_placed_job("plain-job"))
    await controller.queue.process(
        await controller.queue.next_batch(controller.jobs.keys, timeout=0), controller.reconcile, concurrency=1
    )
    await controller.schedule()
    await controller.deferral.account_emissions(T0 + timedelta(minutes=5))
    await controller.deferral.end_chunks(T0)
    controller.reporting.report()
    kube.assert_only_expected_calls()
    return controller, kube


LEVEL_REFUSALS = {UNKNOWN_TOPOLOGY_LEVEL, TOPOLOGY_LEVEL_NOT_LABELLED, TOPOLOGY_LEVELS_OUT_OF_ORDER}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=extreme_training_jobs())
def test_whatever_one_job_holds_the_plain_one_is_scheduled_beside_it(obj: dict[str, Any]) -> None:
    assume(obj["metadata"]["name"] != "plain-job")
    obj["metadata"]["creationTimestamp"] = T0.isoformat()
    controller, _ = asyncio.run(_pass_with(obj))
    plain = status_of(controller, "plain-job")
    assert plain["phase"] in ("Placing", "Queued") and plain["reason"] not in ("InvalidSpec", "CannotSchedule")
    poisoned = status_of(controller, obj["metadata"]["name"])
    admitted = not server_rejections(CRD, obj)
    # What the CRD admits the cycle handles; what it refuses (an older CRD let it in) is set aside as InvalidSpec.
    assert poisoned.get("reason") != "CannotSchedule"
    unschedulable = [
        c["reason"] for c in poisoned.get("conditions", []) if c["type"] == "Schedulable" and c["status"] == "False"
    ]
    set_aside = poisoned.get("reason") == "InvalidSpec" or bool(unschedulable)
    if finished(obj):
        assert not set_aside  # a finished job is never scheduled again: the cycle does not read its spec
    elif admitted and set_aside:
        # The CRD cannot know the cluster's topology levels: the operator refuses a level it lacks.
        assert set(unschedulable) <= LEVEL_REFUSALS, unschedulable
    else:
        assert set_aside != admitted
