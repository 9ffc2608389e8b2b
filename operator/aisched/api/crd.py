"""Turn the pydantic models into CustomResourceDefinitions.

The models are the single source of truth; `aisched crds` writes what this
module builds to crds/ and to the Helm chart, and `make verify` fails when the
committed files differ from it.

pydantic emits JSON Schema 2020-12; the API server wants a *structural*
OpenAPI v3 schema: no $ref, no anyOf for optional fields, no `title`,
`exclusiveMinimum` as a boolean, and no `additionalProperties: false` beside
`properties`. `structural_schema` performs that translation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from aisched.api.common import GROUP, VERSION
from aisched.api.inference_service import InferenceService
from aisched.api.queue import Queue
from aisched.api.training_job import TrainingJob

CATEGORY = "aisched"


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class ResourceDefinition:
    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    columns: tuple[PrinterColumn, ...]
    scale: bool = False
    extra_categories: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kind(self) -> str:
        return str(self.model.model_fields["kind"].default)

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")

RESOURCES: tuple[ResourceDefinition, ...] = (
    ResourceDefinition(
        model=TrainingJob,
        plural="trainingjobs",
        short_names=("aitj", "tj"),
        namespaced=True,
        scale=True,
        columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Where the job is in its life."),
            PrinterColumn("Replicas", "integer", ".status.replicas", "Workers in the running gang."),
            PrinterColumn("GPUs", "integer", ".status.gpus", "GPUs the gang holds."),
            PrinterColumn("Queue", "string", ".spec.queue", "Queue the job is admitted through."),
            PrinterColumn("Placement", "string", ".status.placement.domain", "Topology domain."),
            PrinterColumn("Reason", "string", ".status.reason", "Why it is in this phase."),
            AGE,
            PrinterColumn("Message", "string", ".status.message", "Details.", priority=1),
            PrinterColumn("Deferred-Until", "date", ".status.deferral.until", "Planned start.", priority=1),
            PrinterColumn("Checkpoint", "integer", ".status.lastCheckpoint.step", "Last step saved.", priority=1),
            PrinterColumn("Share-%", "integer", ".spec.gpuShare.computePercent", "Compute of one GPU.", priority=1),
            PrinterColumn("MIG", "string", ".spec.gpuShare.migProfile", "MIG profile of each worker.", priority=1),
            PrinterColumn("GPU-Eq", "number", ".status.gpuEquivalents", "GPU-equivalents the gang holds.", priority=1),
        ),
    ),
    ResourceDefinition(
        model=InferenceService,
        plural="inferenceservices",
        short_names=("aisvc",),  # KServe's is isvc
        namespaced=True,
        scale=True,
        columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Serving state."),
            PrinterColumn("Desired", "integer", ".spec.replicas", "Replicas asked for."),
            PrinterColumn("Ready", "integer", ".status.readyReplicas", "Replicas serving."),
            PrinterColumn("Metric", "number", ".status.currentMetricValue", "Metric per replica."),
            AGE,
            PrinterColumn("Last-Scaling", "string", ".status.lastScaling.reason", "Why.", priority=1),
            PrinterColumn("Share-%", "integer", ".spec.gpuShare.computePercent", "Compute of one GPU.", priority=1),
            PrinterColumn("MIG", "string", ".spec.gpuShare.migProfile", "MIG profile of each replica.", priority=1),
        ),
    ),
    ResourceDefinition(
        model=Queue,
        plural="queues",
        short_names=("aiq", "aq"),
        namespaced=False,
        columns=(
            PrinterColumn("Nominal-GPUs", "integer", ".spec.nominalGPUs", "Guaranteed GPUs."),
            PrinterColumn("Used-GPUs", "integer", ".status.usedGPUs", "GPUs held by its jobs."),
            PrinterColumn("Pending", "integer", ".status.pendingJobs", "Jobs waiting."),
            PrinterColumn("Weight", "integer", ".spec.weight", "Fair-share weight."),
            PrinterColumn("Cohort", "string", ".spec.cohort", "Borrowing group.", priority=1),
            AGE,
        ),
    ),
)


def structural_schema(model: type[BaseModel], *, keep_defaults: bool = True) -> dict[str, Any]:
    """The OpenAPI v3 structural schema of `model`, with every $ref inlined."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    return _convert(raw, definitions, keep_defaults=keep_defaults)


def _convert(node: dict[str, Any], defs: dict[str, Any], *, keep_defaults: bool) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        target.update(node)  # a field's own description/default win over the type's
        node = target
    if "anyOf" in node:
        # `X | None` only: the API server has no null type; optional means absent.
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"unions other than `X | None` are not structural: {options}")
        if node.get("default", ...) is None:
            node.pop("default")
        merged = _convert(options[0], defs, keep_defaults=keep_defaults)
        merged.update({k: v for k, v in node.items() if k != "title"})
        node = merged
    node.pop("title", None)
    if not keep_defaults:
        node.pop("default", None)
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        node["minimum"], node["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if "exclusiveMaximum" in node and not isinstance(node["exclusiveMaximum"], bool):
        node["maximum"], node["exclusiveMaximum"] = node["exclusiveMaximum"], True
    if "enum" in node:
        node.setdefault("type", "string")
    if "properties" in node:
        node.pop("additionalProperties", None)
        node["properties"] = {
            name: _convert(prop, defs, keep_defaults=keep_defaults) for name, prop in node["properties"].items()
        }
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _convert(node["additionalProperties"], defs, keep_defaults=keep_defaults)
    if isinstance(node.get("items"), dict):
        node["items"] = _convert(node["items"], defs, keep_defaults=keep_defaults)
    return node


def _root_schema(definition: ResourceDefinition) -> dict[str, Any]:
    fields = definition.model.model_fields
    spec_type = fields["spec"].annotation
    status_type = fields["status"].annotation
    if not (isinstance(spec_type, type) and issubclass(spec_type, BaseModel)):
        raise TypeError(f"{definition.kind}.spec must be a pydantic model")
    if not (isinstance(status_type, type) and issubclass(status_type, BaseModel)):
        raise TypeError(f"{definition.kind}.status must be a pydantic model")
    spec = structural_schema(spec_type)
    status = structural_schema(status_type, keep_defaults=False)
    root: dict[str, Any] = {
        "type": "object",
        "description": (definition.model.__doc__ or "").strip() or None,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    rules = (definition.model.model_config.get("json_schema_extra") or {}).get(  # type: ignore[union-attr]
        "x-kubernetes-validations"
    )
    if rules:
        root["x-kubernetes-validations"] = rules
    return {k: v for k, v in root.items() if v is not None}


def build_crd(definition: ResourceDefinition) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if definition.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    singular = definition.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": definition.name,
            "labels": {"app.kubernetes.io/part-of": "aisched"},
            # `helm uninstall` must not delete the CRDs: that would delete every job with them.
            "annotations": {"helm.sh/resource-policy": "keep"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": definition.kind,
                "listKind": f"{definition.kind}List",
                "plural": definition.plural,
                "singular": singular,
                "shortNames": list(definition.short_names),
                "categories": [CATEGORY, *definition.extra_categories],
            },
            "scope": "Namespaced" if definition.namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _root_schema(definition)},
                    "subresources": subresources,
                    "additionalPrinterColumns": [c.to_crd() for c in definition.columns],
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    return [build_crd(definition) for definition in RESOURCES]
