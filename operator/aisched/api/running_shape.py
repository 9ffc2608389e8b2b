"""What a running worker or replica holds cannot be edited under it: the API server refuses the edit.

A gang's pods are made once, from the spec it was admitted with; a later spec does not reach them.
Were `gpusPerReplica`, `gpuShare` (a `migProfile` included) or `gpuType` edited under a live gang,
its pods would keep the GPUs they hold while the queue was charged what the spec now says (8 GPUs
lowered to 1: a 7-GPU job admitted beside it). The rules below are transition rules on the whole
object (they read `oldSelf.status`), so the API server evaluates them on updates only, and in
every Kubernetes version the chart supports (CRD CEL rules are on by default since 1.25). The
charge does not depend on them: a running gang is charged what it was admitted with and what its
pods hold (`aisched.policy.scheduler.jobs.admitted_shape`).

The operator's own writes pass: a status write goes through the status subresource, and a
metadata write (kopf's annotations and finalizers) or a scale (`spec.replicas`) leaves these
fields as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aisched.api.common import cel

# The TrainingJob phases in which its gang's workers may hold GPUs charged to the queue
# (`aisched.policy.lifecycle.HOLDS_GPUS`, which a test holds equal). In a waiting phase (Queued,
# Deferred, Suspended) a gang still stopping is not placed again before its pods are gone, so the
# next gang is made, and charged, from the spec as edited.
PHASES_HOLDING_GPUS: Final = ("Placing", "Running", "Checkpointing", "Restarting")
# What one worker holds.
TRAINING_JOB_SHAPE_FIELDS: Final = ("gpusPerReplica", "gpuShare", "gpuType")
# An InferenceService rolls its replicas over to a new `gpusPerReplica` or `gpuType` (both are in
# the hash its replicas are matched by, `kube.serving_builders.template_hash`), each new replica
# asked of the cycle and charged what its pod holds; a `gpuShare` edit rolls nothing, so it would
# leave replicas of two shapes under one service: it waits until no replica is left.
INFERENCE_SERVICE_SHAPE_FIELDS: Final = ("gpuShare",)


def training_job_shape_message(field: str) -> str:
    return (
        f"spec.{field} cannot change while the job holds GPUs (phase {', '.join(PHASES_HOLDING_GPUS)}): "
        "set spec.suspend to true and change it once the job is Suspended, or delete the job and submit it again"
    )


def inference_service_shape_message(field: str) -> str:
    return (
        f"spec.{field} cannot change while the service has replicas (status.replicas above 0): scale it to 0 "
        "(spec.replicas: 0, autoscaling off) and change it once status.replicas is 0, or delete the service and "
        "create it again"
    )


def _unchanged(field: str) -> str:
    """CEL: spec.FIELD is as it was, set or not."""
    new, old = f"self.spec.{field}", f"oldSelf.spec.{field}"
    return f"(has({new}) ? has({old}) && {new} == {old} : !has({old}))"


_PHASES_CEL = "[" + ", ".join(f"'{phase}'" for phase in PHASES_HOLDING_GPUS) + "]"
_JOB_HOLDS_GPUS = f"has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase in {_PHASES_CEL}"
_SERVICE_HAS_REPLICAS = "has(oldSelf.status) && has(oldSelf.status.replicas) && oldSelf.status.replicas > 0"

TRAINING_JOB_SHAPE_RULES: Final = [
    cel(f"!({_JOB_HOLDS_GPUS}) || {_unchanged(field)}", training_job_shape_message(field))
    for field in TRAINING_JOB_SHAPE_FIELDS
]
INFERENCE_SERVICE_SHAPE_RULES: Final = [
    cel(f"!({_SERVICE_HAS_REPLICAS}) || {_unchanged(field)}", inference_service_shape_message(field))
    for field in INFERENCE_SERVICE_SHAPE_FIELDS
]


def shape_edit_refusals(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The messages the rules above give for the update of the stored object OLD to NEW (wire dicts of
    KIND), in their order: the models' side of them (an update is no single model's to validate)."""
    stored = old.get("status")
    old_status: Mapping[str, Any] = stored if isinstance(stored, Mapping) else {}
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    fields: tuple[str, ...]
    if kind == "TrainingJob":
        held = old_status.get("phase") in PHASES_HOLDING_GPUS
        fields, message = TRAINING_JOB_SHAPE_FIELDS, training_job_shape_message
    else:
        replicas = old_status.get("replicas")
        held = isinstance(replicas, int) and replicas > 0
        fields, message = INFERENCE_SERVICE_SHAPE_FIELDS, inference_service_shape_message
    if not held:
        return []
    return [message(field) for field in fields if old_spec.get(field) != new_spec.get(field)]
