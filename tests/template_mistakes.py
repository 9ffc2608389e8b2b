"""Mistakes in a pod template that break one of its bounds or names (aisched.api.pod_template),
each refused at apply: by the model with the field named, by the API server with its own words."""

from __future__ import annotations

from typing import Any

from tests.builders import a_training_job, an_inference_service


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "trainer", "image": "i", **fields}


def _one(**fields: Any) -> list[dict[str, Any]]:
    return [_container(**fields)]


_GPU_7 = {"limits": {"nvidia.com/gpu": 7}}


TemplateMistake = tuple[str, dict[str, Any], str, str | None]
"""name, object, what the API server says, what the model says (None: the same); tests.mistakes lists them."""


def _mistake(name: str, obj: dict[str, Any], server_says: str, model_says: str | None = None) -> TemplateMistake:
    return (name, obj, server_says, model_says)


def template_bounds() -> list[TemplateMistake]:
    job = a_training_job
    return [
        _mistake(
            "env longer than 256 entries",
            job()
            .set("template.spec.containers", _one(env=[{"name": f"E{i}", "value": "1"} for i in range(257)]))
            .obj(),
            "Too many",
            "template.spec.containers[0].env may hold at most 256 items",
        ),
        _mistake(
            "env value over 32 KiB",
            job().set("template.spec.containers", _one(env=[{"name": "BIG", "value": "x" * 32769}])).obj(),
            "Too long",
            "template.spec.containers[0].env[0].value may be at most 32768 characters",
        ),
        _mistake(
            "env variable name the API server refuses",
            job().set("template.spec.containers", _one(env=[{"name": "1=BAD", "value": "1"}])).obj(),
            "should match",
            "env[0].name must be an environment variable name",
        ),
        _mistake(
            "250-character container name",
            job().set("template.spec.containers", [{"name": "c" * 250, "image": "i"}]).obj(),
            "Too long",
            "template.spec.containers[0].name must be a DNS-1123 label",
        ),
        _mistake(
            "container name not a DNS label",
            job().set("template.spec.containers", [{"name": "Trainer_1", "image": "i"}]).obj(),
            "should match",
            "template.spec.containers[0].name must be a DNS-1123 label",
        ),
        _mistake(
            "init container name not a DNS label",
            job().set("template.spec.initContainers", [{"name": "Setup", "image": "i"}]).obj(),
            "should match",
            "template.spec.initContainers[0].name must be a DNS-1123 label",
        ),
        _mistake(
            "more than 16 containers",
            job().set("template.spec.containers", [_container(name=f"c{i}") for i in range(17)]).obj(),
            "Too many",
            "template.spec.containers may hold at most 16 items",
        ),
        _mistake(
            "more than 1024 args",
            job().set("template.spec.containers", _one(args=["--x"] * 1025)).obj(),
            "Too many",
            "template.spec.containers[0].args may hold at most 1024 items",
        ),
        _mistake(
            "volume name not a DNS label",
            job().set("template.spec.volumes", [{"name": "Data_1", "emptyDir": {}}]).obj(),
            "should match",
            "template.spec.volumes[0].name must be a DNS-1123 label",
        ),
        _mistake(
            "volume mount without a path",
            job().set("template.spec.containers", _one(volumeMounts=[{"name": "data"}])).obj(),
            "Required value",
            "template.spec.containers[0].volumeMounts[0] needs mountPath",
        ),
        _mistake(
            "port name longer than 15 characters",
            job()
            .set("template.spec.containers", _one(ports=[{"name": "metrics-endpoint", "containerPort": 9090}]))
            .obj(),
            "Too long",
            "template.spec.containers[0].ports[0].name must be a port name",
        ),
        _mistake(
            "more than 64 tolerations",
            job().set("template.spec.tolerations", [{"key": f"k{i}", "operator": "Exists"} for i in range(65)]).obj(),
            "Too many",
            "template.spec.tolerations may hold at most 64 items",
        ),
        _mistake(
            "more than 64 template annotations",
            job().set("template.metadata", {"annotations": {f"a{i}": "v" for i in range(65)}}).obj(),
            "Too many",
            "template.metadata.annotations may hold at most 64 entries",
        ),
        _mistake(
            "template annotation over 4 KiB",
            job().set("template.metadata", {"annotations": {"note": "x" * 4097}}).obj(),
            "Too long",
            "template.metadata.annotations[note] may be at most 4096 characters",
        ),
        _mistake(
            "more than 16 image pull secrets",
            job().set("template.spec.imagePullSecrets", [{"name": f"s{i}"} for i in range(17)]).obj(),
            "Too many",
            "template.spec.imagePullSecrets may hold at most 16 items",
        ),
        _mistake(  # issue #26: it ran holding 7 GPUs, its queue charged 1
            "init container asks for GPUs",
            job()
            .gpus(1)
            .set("template.spec.initContainers", [{"name": "warm", "image": "i", "resources": _GPU_7}])
            .obj(),
            "init containers of the template may not ask for nvidia.com/gpu",
        ),
        _mistake(
            "sidecar init container asks for GPUs",
            job()
            .gpus(1)
            .set(
                "template.spec.initContainers",
                [
                    {
                        "name": "side",
                        "image": "i",
                        "restartPolicy": "Always",
                        "resources": {"requests": {"nvidia.com/gpu": 1}},
                    }
                ],
            )
            .obj(),
            "init containers of the template may not ask for nvidia.com/gpu",
        ),
        _mistake(
            "model server init container asks for GPUs",
            an_inference_service()
            .set("template.spec.initContainers", [{"name": "load", "image": "i", "resources": _GPU_7}])
            .obj(),
            "init containers of the template may not ask for nvidia.com/gpu",
        ),
        _mistake(
            "template labels its pods as another job's workers",
            job().set("template.metadata.labels", {"aisched.io/job-name": "someone-else"}).obj(),
            "template.metadata.labels may not set keys under aisched.io/",
        ),
        _mistake(
            "model server template claims a share of a GPU",
            an_inference_service().set("template.metadata.annotations", {"aisched.io/gpu-share": "0:1000:81920"}).obj(),
            "template.metadata.annotations may not set keys under aisched.io/",
        ),
    ]


TEMPLATE_BOUNDS = template_bounds()
