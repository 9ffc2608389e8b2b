from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from aisched.api import InferenceService, Queue, TrainingJob
from aisched.api.crd import all_crds
from tests.builders import DEFAULT_TEMPLATE
from tests.mistakes import MISTAKES, Mistake
from tests.unit.api.server_like import server_rejections
from tests.unit.api.test_models import example_objects

ROOT = Path(__file__).parents[3]
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
MODELS: dict[str, type[BaseModel]] = {
    "TrainingJob": TrainingJob,
    "InferenceService": InferenceService,
    "Queue": Queue,
}


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _walk(value, f"{path}[{index}]")
    return found


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schemas_are_structural(kind: str) -> None:
    schema = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = json.dumps(schema)
    for forbidden in ('"$ref"', '"anyOf"', '"title"', '"$defs"', '"allOf"', '"const"'):
        assert forbidden not in text, f"{kind} schema contains {forbidden}"
    for path, node in _walk(schema):
        if "properties" in node or node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") == "object", f"{path} lacks type: object"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert ".properties.template" in path, f"unknown fields kept outside the pod template: {path}"


def test_scale_subresource_where_replicas_scale() -> None:
    assert "scale" in CRDS["TrainingJob"]["spec"]["versions"][0]["subresources"]
    assert "scale" in CRDS["InferenceService"]["spec"]["versions"][0]["subresources"]
    assert "scale" not in CRDS["Queue"]["spec"]["versions"][0]["subresources"]
    assert CRDS["Queue"]["spec"]["scope"] == "Cluster"


def test_every_kind_has_a_short_name_no_namesake_project_uses() -> None:
    # Volcano's and KAI's queues, KServe's inferenceservices (isvc), SageMaker's trainingjobs and
    # Kueue's localqueues (queue, queues, lq) share plurals with ours: a distinctive short name each.
    namesakes = {"q", "queue", "queues", "lq", "cq", "isvc", "trainingjob", "trainingjobs", "inferenceservices"}
    for kind, crd in CRDS.items():
        short = crd["spec"]["names"]["shortNames"]
        assert short[0].startswith("ai"), kind
        assert not namesakes & set(short), kind


@pytest.mark.parametrize(("where", "obj"), example_objects(), ids=[w for w, _ in example_objects()])
def test_examples_pass_the_generated_schema(where: str, obj: dict[str, Any]) -> None:
    assert server_rejections(CRDS[obj["kind"]], obj) == []


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_generated_schema_rejects_each_mistake(mistake: Mistake) -> None:
    assert server_rejections(CRDS[mistake.obj["kind"]], mistake.obj), mistake.name


# Specs drawn from ranges that straddle every bound and rule, so about half are
# invalid; the models and the CRD (schema + CEL) must agree on every one.
_maybe = st.one_of(st.none(), st.integers(min_value=-2, max_value=10))
_level = st.sampled_from([None, "Node", "NVLinkDomain", "Rack", "Zone", "Host", "rack 3"])


@st.composite
def training_job_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": DEFAULT_TEMPLATE}
    for field, value in {
        "replicas": draw(_maybe),
        "minReplicas": draw(_maybe),
        "maxReplicas": draw(_maybe),
        "gpusPerReplica": draw(st.integers(min_value=-1, max_value=70)),
        "expectedDurationSeconds": draw(st.one_of(st.none(), st.integers(min_value=0, max_value=5))),
        "deadline": draw(st.sampled_from([None, "2030-01-01T00:00:00Z"])),
        "priority": draw(st.sampled_from([0, -1_000_001, 1_000_000_000, 1_000_000_001])),
    }.items():
        if value is not None:
            spec[field] = value
    topology = {k: v for k, v in {"requiredLevel": draw(_level), "preferredLevel": draw(_level)}.items() if v}
    if topology:
        spec["topology"] = topology
    carbon = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "deferrable": st.booleans(),
                "maxDelaySeconds": st.integers(min_value=-1, max_value=10),
                "mode": st.sampled_from(["Forecast", "Threshold", "Sometimes"]),
                "thresholdGramsPerKWh": st.sampled_from([0, 150.5]),
                "interruptible": st.booleans(),
            },
        )
    )
    if carbon:
        spec["carbon"] = carbon
    if draw(st.booleans()):
        spec["checkpoint"] = {"intervalSeconds": draw(st.sampled_from([29, 30, 600]))}
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": spec,
    }


def _model_accepts(obj: dict[str, Any]) -> bool:
    try:
        MODELS[obj["kind"]].model_validate(obj)
    except ValidationError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_job_specs())
def test_models_and_crd_agree_on_generated_training_jobs(obj: dict[str, Any]) -> None:
    server_errors = server_rejections(CRDS["TrainingJob"], obj)
    assert _model_accepts(obj) == (not server_errors), server_errors


@st.composite
def inference_service_specs(draw: st.DrawFn) -> dict[str, Any]:
    metric_spec: dict[str, Any] = {
        "type": draw(st.sampled_from(["RequestsPerSecond", "PromQL", "Bogus"])),
        "targetPerReplica": 5,
    }
    query = draw(st.sampled_from([None, "sum(rate(x[1m]))"]))
    if query:
        metric_spec["query"] = query
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "s"},
        "spec": {
            "gpusPerReplica": 1,
            "template": DEFAULT_TEMPLATE,
            "autoscaling": {
                "minReplicas": draw(st.integers(min_value=-1, max_value=4)),
                "maxReplicas": draw(st.integers(min_value=0, max_value=4)),
                "scaleToZero": draw(st.booleans()),
                "metric": metric_spec,
            },
            "rollout": {
                "maxSurge": draw(st.integers(min_value=0, max_value=1)),
                "maxUnavailable": draw(st.integers(min_value=0, max_value=1)),
            },
        },
    }


@settings(max_examples=150, deadline=None)
@given(inference_service_specs())
def test_models_and_crd_agree_on_generated_inference_services(obj: dict[str, Any]) -> None:
    server_errors = server_rejections(CRDS["InferenceService"], obj)
    assert _model_accepts(obj) == (not server_errors), server_errors


def test_deadline_round_trips_as_rfc3339() -> None:
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "a"},
            "spec": {
                "gpusPerReplica": 1,
                "template": DEFAULT_TEMPLATE,
                "deadline": "2030-01-01T00:00:00Z",
                "expectedDurationSeconds": 60,
            },
        }
    )
    assert job.spec.deadline == datetime(2030, 1, 1, tzinfo=UTC)
    assert yaml.safe_load(yaml.safe_dump(job.to_wire()))["spec"]["deadline"].startswith("2030-01-01T00:00:00")
