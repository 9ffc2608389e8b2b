"""What a running worker holds cannot be edited under it: the CRD's transition rules, as the API server
evaluates them on an update (tests/unit/api/server_like.py), agree with `shape_edit_refusals`, refuse the
attacks of issue 37, and let every write the operator and kopf make through."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisched.api import TrainingJobPhase
from aisched.api.crd import all_crds
from aisched.api.running_shape import (
    PHASES_HOLDING_GPUS,
    inference_service_shape_message,
    shape_edit_refusals,
    training_job_shape_message,
)
from aisched.policy.lifecycle import HOLDS_GPUS
from tests.builders import a_training_job, an_inference_service
from tests.unit.api.server_like import server_rejections

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
H100 = "NVIDIA-H100-80GB-HBM3"
# Shapes a spec may have (gpusPerReplica, gpuShare, gpuType), every one valid on its own.
SHAPES: list[tuple[int, dict[str, Any] | None, str | None]] = [
    (8, None, None),
    (1, None, None),
    (1, None, H100),
    (2, None, "NVIDIA-L4"),
    (1, {"computePercent": 1}, None),
    (1, {"computePercent": 50, "memoryMiB": 1024}, None),
    (1, {"migProfile": "1g.10gb"}, H100),
    (1, {"migProfile": "3g.40gb"}, None),
]
ALL_PHASES = [None, *(phase.value for phase in TrainingJobPhase)]


def _shaped(obj: dict[str, Any], shape: tuple[int, dict[str, Any] | None, str | None]) -> dict[str, Any]:
    gpus, share, gpu_type = shape
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    spec["gpusPerReplica"] = gpus
    for field, value in (("gpuShare", share), ("gpuType", gpu_type)):
        if value is None:
            spec.pop(field, None)
        else:
            spec[field] = copy.deepcopy(value)
    return obj


def a_job(phase: str | None, shape: tuple[int, dict[str, Any] | None, str | None] = SHAPES[0]) -> dict[str, Any]:
    obj = _shaped(a_training_job("llm").namespace("team").replicas(2).obj(), shape)
    if phase is not None:
        obj["status"] = {"phase": phase, "placement": {"nodes": ["a", "b"]}, "replicas": 2}
    return obj


def a_service(replicas: int | None, shape: tuple[int, dict[str, Any] | None, str | None] = SHAPES[1]) -> dict[str, Any]:
    obj = _shaped(an_inference_service("chat").namespace("team").replicas(2).obj(), shape)
    if replicas is not None:
        obj["status"] = {"replicas": replicas}
    return obj


def test_the_rules_know_the_phases_in_which_the_lifecycle_says_a_gang_holds_gpus() -> None:
    assert tuple(PHASES_HOLDING_GPUS) == tuple(phase.value for phase in HOLDS_GPUS)


@pytest.mark.parametrize("phase", PHASES_HOLDING_GPUS)
def test_lowering_gpus_per_replica_of_a_gang_that_holds_gpus_is_refused(phase: str) -> None:
    old = a_job(phase, SHAPES[0])
    new = _shaped(old, SHAPES[1])
    assert server_rejections(CRDS["TrainingJob"], new, old) == [training_job_shape_message("gpusPerReplica")]


def test_adding_a_share_to_a_running_whole_gpu_gang_is_refused() -> None:
    old = a_job("Running", SHAPES[1])
    new = _shaped(old, SHAPES[4])
    assert server_rejections(CRDS["TrainingJob"], new, old) == [training_job_shape_message("gpuShare")]
    assert "spec.suspend" in training_job_shape_message("gpuShare")


def test_changing_the_mig_profile_or_gpu_type_of_a_running_gang_is_refused() -> None:
    old = a_job("Running", SHAPES[6])
    other_profile = _shaped(old, (1, {"migProfile": "2g.20gb"}, H100))
    assert server_rejections(CRDS["TrainingJob"], other_profile, old) == [training_job_shape_message("gpuShare")]
    no_type = _shaped(old, (1, {"migProfile": "1g.10gb"}, None))
    assert server_rejections(CRDS["TrainingJob"], no_type, old) == [training_job_shape_message("gpuType")]


@pytest.mark.parametrize("phase", [None, "Queued", "Deferred", "Suspended", "Succeeded", "Failed"])
def test_a_job_whose_gang_holds_nothing_may_change_its_shape(phase: str | None) -> None:
    old = a_job(phase, SHAPES[0])
    assert server_rejections(CRDS["TrainingJob"], _shaped(old, SHAPES[4]), old) == []


def test_a_job_is_created_with_any_valid_shape_the_rules_reading_the_old_object_do_not_run() -> None:
    # A create has no old object: even a status that says Running (as an old backup restored) passes them.
    assert server_rejections(CRDS["TrainingJob"], a_job("Running", SHAPES[4])) == []


@pytest.mark.parametrize("phase", ALL_PHASES)
def test_the_operators_and_kopfs_writes_pass_in_every_phase(phase: str | None) -> None:
    old = a_job(phase, SHAPES[6])
    status_write = copy.deepcopy(old)
    status_write["status"] = {
        "phase": "Running",
        "placement": {"nodes": ["c", "d"], "gpusPerReplica": 1, "gpuShare": {"migProfile": "1g.10gb"}},
        "replicas": 2,
        "gpus": 2,
    }
    kopf_write = copy.deepcopy(old)
    kopf_write["metadata"]["annotations"] = {"aisched.io/last-handled-configuration": "{}"}
    kopf_write["metadata"]["finalizers"] = ["aisched.io/checkpoint-report"]
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 3
    other_fields = copy.deepcopy(old)
    other_fields["spec"]["priority"] = 5
    other_fields["spec"]["suspend"] = True
    for write in (status_write, kopf_write, scaled, other_fields):
        assert server_rejections(CRDS["TrainingJob"], write, old) == []


def test_a_services_share_waits_for_its_replicas_to_go_its_gpus_roll_over() -> None:
    old = a_service(2, SHAPES[1])
    shared = _shaped(old, SHAPES[4])
    assert server_rejections(CRDS["InferenceService"], shared, old) == [inference_service_shape_message("gpuShare")]
    # A new gpusPerReplica or gpuType is a new template hash: replicas roll over, each charged what its pod holds.
    assert server_rejections(CRDS["InferenceService"], _shaped(old, SHAPES[3]), old) == []
    for idle in (a_service(0, SHAPES[1]), a_service(None, SHAPES[1])):
        assert server_rejections(CRDS["InferenceService"], _shaped(idle, SHAPES[4]), idle) == []
    scaled = copy.deepcopy(a_service(2, SHAPES[4]))
    scaled["spec"]["replicas"] = 5
    assert server_rejections(CRDS["InferenceService"], scaled, a_service(2, SHAPES[4])) == []


@st.composite
def updates(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any]]:
    kind = draw(st.sampled_from(["TrainingJob", "InferenceService"]))
    before, after = draw(st.sampled_from(SHAPES)), draw(st.sampled_from(SHAPES))
    if kind == "TrainingJob":
        old = a_job(draw(st.sampled_from(ALL_PHASES)), before)
    else:
        old = a_service(draw(st.sampled_from([None, 0, 1, 3])), before)
    new = _shaped(old, after)
    if draw(st.booleans()):
        new["spec"]["replicas"] = draw(st.integers(min_value=1, max_value=4))
    if draw(st.booleans()):
        new["status"] = {"replicas": draw(st.integers(min_value=0, max_value=4))}  # never seen by the rules' old
    return kind, old, new


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(updates())
def test_the_crd_and_the_models_side_agree_on_every_update(update: tuple[str, dict[str, Any], dict[str, Any]]) -> None:
    kind, old, new = update
    assert server_rejections(CRDS[kind], new, old) == shape_edit_refusals(kind, old, new)
