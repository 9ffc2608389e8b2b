"""The bounds of every CRD, and the pod template's: each list and string has one, real templates pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from aisched.api import TrainingJob
from aisched.api.crd import all_crds
from aisched.api.pod_template import MAX_ENV, MAX_ENV_VALUE_LENGTH, POD_TEMPLATE_SCHEMA, schema_violation
from tests.builders import a_training_job
from tests.unit.api.server_like import server_rejections

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
# Strings whose format or values bound them, and the root's, which the API server fills in itself.
_BOUNDED_BY_FORMAT = ("enum", "format")
_ROOT_FIELDS = {".properties.apiVersion", ".properties.kind"}


def _unbounded(node: dict[str, Any], path: str = "") -> list[str]:
    found = []
    if node.get("type") == "array" and "maxItems" not in node:
        found.append(path)
    if node.get("type") == "string" and "maxLength" not in node and not any(k in node for k in _BOUNDED_BY_FORMAT):
        found.append(path)
    if node.get("x-kubernetes-int-or-string") and "maxLength" not in node:
        found.append(path)
    if isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
        found.append(path)
    for name, child in node.get("properties", {}).items():
        found += _unbounded(child, f"{path}.properties.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _unbounded(node[key], f"{path}.{key}")
    return [p for p in found if p not in _ROOT_FIELDS]


@pytest.mark.parametrize("kind", ["TrainingJob", "InferenceService", "Queue"])
def test_every_list_string_and_map_of_the_crd_is_bounded(kind: str) -> None:
    schema = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _unbounded(schema) == []


def test_every_list_string_and_map_of_the_pod_template_is_bounded() -> None:
    assert _unbounded(POD_TEMPLATE_SCHEMA) == []


def _job_with(template: dict[str, Any]) -> dict[str, Any]:
    return a_training_job().set("template", template).obj()


REALISTIC_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "nlp"}, "annotations": {"prometheus.io/scrape": "true"}},
    "spec": {
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["sh", "-c", "cp -r /src /data"]}],
        "containers": [
            {
                "name": "trainer",
                "image": "registry.example.com/team/trainer:v1.2@sha256:" + "a" * 64,
                "command": ["torchrun"],
                "args": ["--nproc-per-node=8", "train.py", "--config", "/etc/train/config.yaml"],
                "workingDir": "/workspace",
                "env": [
                    {"name": "NCCL_DEBUG", "value": "WARN"},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": True}}},
                    {
                        "name": "LIMIT",
                        "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
                    },
                    {"name": "my.dotted-name", "value": "ok"},
                ],
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
                "ports": [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}, "requests": {"cpu": "8"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 9090}},
                "securityContext": {"runAsNonRoot": True},
            },
            {"name": "log-shipper", "image": "fluent-bit", "restartPolicy": "Always"},
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
            {"name": "shm", "emptyDir": {}},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "a100"},
        "imagePullSecrets": [{"name": "registry"}],
    },
}


def test_a_realistic_template_passes_the_model_and_the_crd() -> None:
    obj = _job_with(REALISTIC_TEMPLATE)
    assert server_rejections(CRDS["TrainingJob"], obj) == []
    assert TrainingJob.model_validate(obj).spec.template == REALISTIC_TEMPLATE


def test_a_template_at_every_bound_passes() -> None:
    template = copy.deepcopy(REALISTIC_TEMPLATE)
    template["spec"]["containers"][0]["env"] = [
        {"name": f"V{i}", "value": "x" * (MAX_ENV_VALUE_LENGTH if i == 0 else 1)} for i in range(MAX_ENV)
    ]
    template["spec"]["containers"][0]["name"] = "c" * 63
    obj = _job_with(template)
    assert server_rejections(CRDS["TrainingJob"], obj) == []
    TrainingJob.model_validate(obj)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["spec", "containers", 0, "ports", 0, "containerPort"], 70000, "must be from 1 to 65535"),
        (["spec", "containers", 0, "ports", 0, "protocol"], "HTTP", "must be TCP, UDP or SCTP"),
        (["spec", "containers", 0, "env", 0, "valueFrom", "secretKeyRef", "optional"], "yes", "must be true or false"),
        (["spec", "containers", 0, "env", 0, "valueFrom", "fileRef"], {}, "has unknown fields ['fileRef']"),
        (["spec", "containers", 0, "resources", "limits", "memory"], "9" * 65, "must be an integer or a string"),
        (["spec", "volumes", 0], {"emptyDir": {}}, "template.spec.volumes[0] needs name"),
        (["spec", "nodeSelector"], {f"k{i}": "v" for i in range(33)}, "may hold at most 32 entries"),
    ],
)
def test_the_model_names_what_breaks_a_bound(path: list[Any], value: Any, message: str) -> None:
    template = copy.deepcopy(REALISTIC_TEMPLATE)
    template["spec"]["containers"][0]["env"][0] = {
        "name": "S",
        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
    }
    node: Any = template
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    obj = _job_with(template)
    assert server_rejections(CRDS["TrainingJob"], obj), "the CRD took it"
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TrainingJob.model_validate(obj)


def test_the_walk_names_a_field_kubernetes_does_not_define() -> None:
    # The template is closed as a Pod is: the API server prunes such a field, the model names it.
    template = {"spec": {"containers": [{"name": "c", "image": "i", "lifecycle": {"anything": ["at", "all"]}}]}}
    assert schema_violation(POD_TEMPLATE_SCHEMA, template, "template") == (
        "template.spec.containers[0].lifecycle has unknown fields ['anything']"
    )


def test_fields_kubernetes_defines_but_aisched_does_not_bound_pass() -> None:
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10}
    container = {"name": "c", "image": "i", "readinessProbe": probe, "securityContext": {"runAsUser": 1000}}
    template = {"spec": {"containers": [container], "affinity": {"nodeAffinity": {}}, "hostIPC": False}}
    assert schema_violation(POD_TEMPLATE_SCHEMA, template, "template") is None
