"""Pydantic models of aisched's custom resources: the source the CRDs are generated from.

Pure: imports neither kopf nor kubernetes, reads no clock, does no I/O.
"""

from aisched.api.common import (
    API_VERSION,
    GROUP,
    NODE_LEVEL,
    VERSION,
    CapacityType,
    Condition,
    ConditionStatus,
    SpotPolicy,
    TopologyLevelName,
)
from aisched.api.inference_service import InferenceService, InferenceServiceSpec
from aisched.api.queue import DEFAULT_QUEUE, Queue, QueueSpec
from aisched.api.training_job import TrainingJob, TrainingJobPhase, TrainingJobSpec

__all__ = [
    "API_VERSION",
    "DEFAULT_QUEUE",
    "GROUP",
    "NODE_LEVEL",
    "VERSION",
    "CapacityType",
    "Condition",
    "ConditionStatus",
    "InferenceService",
    "InferenceServiceSpec",
    "Queue",
    "QueueSpec",
    "SpotPolicy",
    "TopologyLevelName",
    "TrainingJob",
    "TrainingJobPhase",
    "TrainingJobSpec",
]
