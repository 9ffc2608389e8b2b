from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from aisched.api import InferenceService, Queue, TrainingJob
from tests.mistakes import MISTAKES, Mistake

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"
MODELS: dict[str, type[BaseModel]] = {
    "TrainingJob": TrainingJob,
    "InferenceService": InferenceService,
    "Queue": Queue,
}


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):  # those apart (mig/, real-training/) too
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((f"{path.relative_to(EXAMPLES)}:{document['metadata']['name']}", document))
    return found


@pytest.mark.parametrize(("where", "obj"), example_objects(), ids=[w for w, _ in example_objects()])
def test_every_example_parses_and_round_trips(where: str, obj: dict[str, Any]) -> None:
    model = MODELS[obj["kind"]].model_validate(obj)
    wire = model.to_wire()  # type: ignore[attr-defined]
    assert MODELS[obj["kind"]].model_validate(wire) == model
    assert wire["metadata"]["name"] == obj["metadata"]["name"]


def test_examples_cover_every_kind_and_feature() -> None:
    kinds = {obj["kind"] for _, obj in example_objects()}
    assert kinds == set(MODELS)
    jobs = [TrainingJob.model_validate(o).spec for _, o in example_objects() if o["kind"] == "TrainingJob"]
    assert any(j.elastic for j in jobs)
    assert any(j.topology.required_level for j in jobs)
    assert any(j.spot.policy == "Prefer" for j in jobs)
    assert any(j.carbon.deferrable for j in jobs)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_models_reject_each_mistake_with_a_clear_message(mistake: Mistake) -> None:
    with pytest.raises(ValidationError) as raised:
        MODELS[mistake.obj["kind"]].model_validate(mistake.obj)
    assert mistake.expected_from_model in str(raised.value)


def test_wire_format_is_camel_case_and_drops_unset_fields() -> None:
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "a"},
            "spec": {
                "gpusPerReplica": 2,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        }
    )
    spec = job.to_wire()["spec"]
    assert spec["gpusPerReplica"] == 2
    assert spec["runPolicy"] == {"backoffLimit": 3}
    assert "deadline" not in spec
    assert job.spec.total_gpus == 2
