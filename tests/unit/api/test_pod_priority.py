"""A template may name no priority of its own: the CRDs and the models refuse it alike, with one message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from aisched.api import InferenceService, TrainingJob
from aisched.api.crd import all_crds
from aisched.api.pod_priority import PRIORITY_FIELDS, priority_message
from tests.builders import a_training_job, an_inference_service
from tests.unit.api.server_like import server_rejections

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
VALUES = {"priorityClassName": "system-node-critical", "priority": 2_000_001_000, "preemptionPolicy": "Never"}


@pytest.mark.parametrize("field", PRIORITY_FIELDS)
@pytest.mark.parametrize(
    ("kind", "model", "make"),
    [
        ("TrainingJob", TrainingJob, lambda: a_training_job("j").gpus(1).obj()),
        ("InferenceService", InferenceService, lambda: an_inference_service("s").obj()),
    ],
    ids=["TrainingJob", "InferenceService"],
)
def test_a_template_that_names_a_priority_is_refused_by_the_crd_and_the_model(
    field: str, kind: str, model: type[BaseModel], make: Callable[[], dict[str, Any]]
) -> None:
    obj = make()
    assert server_rejections(CRDS[kind], obj) == []
    obj["spec"]["template"]["spec"][field] = VALUES[field]
    assert server_rejections(CRDS[kind], obj) == [priority_message(field)]
    with pytest.raises(ValidationError, match=priority_message(field).split(":")[0]):
        model.model_validate(obj)
