"""Kinds of mistake a user can make in a spec, shared by the unit tier (pydantic
models) and the integration tier (the real API server), so both are held to the
same list. Each must be rejected with a message that names the problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.builders import a_queue, a_training_job, an_inference_service
from tests.template_mistakes import TEMPLATE_BOUNDS


@dataclass(frozen=True)
class Mistake:
    name: str
    obj: dict[str, Any]
    server_says: str  # fragment of the API server's message
    model_says: str | None = None  # fragment of the pydantic message, when it differs

    @property
    def expected_from_model(self) -> str:
        return self.model_says or self.server_says


def _long_name() -> str:
    return "x" * 49


MISTAKES: list[Mistake] = [
    Mistake("negative GPUs", a_training_job().gpus(-1).obj(), "greater than or equal to 1"),
    Mistake("zero replicas", a_training_job().replicas(0).obj(), "greater than or equal to 1"),
    Mistake(
        "replicas is not a number",
        a_training_job().set("replicas", "four").obj(),
        "must be of type integer",
        "valid integer",
    ),
    Mistake(
        "GPUs per replica missing",
        {
            **a_training_job().obj(),
            "spec": {"replicas": 1, "template": a_training_job().obj()["spec"]["template"]},
        },
        "Required value",
        "Field required",
    ),
    Mistake(
        "minReplicas > maxReplicas",
        a_training_job().replicas(4).elastic(6, 3).obj(),
        "minReplicas must be <= replicas",
    ),
    Mistake(
        "replicas above maxReplicas",
        a_training_job().replicas(9).elastic(2, 8).obj(),
        "replicas must be <= maxReplicas",
    ),
    Mistake(
        "minReplicas without maxReplicas",
        a_training_job().replicas(2).set("minReplicas", 1).obj(),
        "elastic jobs set both minReplicas and maxReplicas",
    ),
    # Which levels exist is the operator's configuration: an unknown one, or a preferred level wider
    # than the required, is its condition (aisched.policy.level_refusals); the schema checks the form.
    Mistake(
        "a topology level that is not a name",
        a_training_job().required_level("rack 3").obj(),
        "should match",
        "String should match pattern",
    ),
    Mistake(
        "unknown spot policy",
        a_training_job().spot("Sometimes").obj(),
        'Unsupported value: "Sometimes"',
        "Input should be 'Never', 'Prefer' or 'Only'",
    ),
    Mistake(
        "deadline without expected duration",
        a_training_job().set("deadline", "2030-01-01T00:00:00Z").obj(),
        "a deadline needs expectedDurationSeconds",
    ),
    Mistake(
        "deadline is not a date",
        a_training_job().set("deadline", "next tuesday").set("expectedDurationSeconds", 60).obj(),
        "date-time",
        "valid datetime",
    ),
    Mistake(
        "deferrable without expected duration",
        a_training_job().set("carbon.deferrable", True).set("carbon.maxDelaySeconds", 3600).obj(),
        "a deferrable job needs expectedDurationSeconds",
    ),
    Mistake(
        "deferrable without deadline or max delay",
        a_training_job().set("carbon.deferrable", True).set("expectedDurationSeconds", 600).obj(),
        "a deferrable job needs a deadline or carbon.maxDelaySeconds",
    ),
    Mistake(
        "threshold mode without threshold",
        a_training_job().set("carbon.mode", "Threshold").obj(),
        "carbon.mode Threshold needs carbon.thresholdGramsPerKWh",
    ),
    Mistake(
        "interruptible without checkpointing",
        a_training_job().set("carbon.interruptible", True).obj(),
        "carbon.interruptible needs checkpoint settings",
    ),
    Mistake(
        "checkpoint interval too short",
        a_training_job().set("checkpoint.intervalSeconds", 5).obj(),
        "greater than or equal to 30",
    ),
    Mistake(
        "queue name not a DNS label",
        a_training_job().queue("Team_A").obj(),
        "should match",
        "should match pattern",
    ),
    Mistake(
        "template without containers",
        a_training_job().set("template", {"spec": {"containers": []}}).obj(),
        "should have at least 1 items",
        "needs at least one container",
    ),
    Mistake(
        "container without image",
        a_training_job().set("template", {"spec": {"containers": [{"name": "x"}]}}).obj(),
        "Required value",
        "needs a name and an image",
    ),
    Mistake(
        "name too long for its pods",
        a_training_job(_long_name()).obj(),
        "TrainingJob names are at most 48 characters",
    ),
    Mistake(
        "name not a host name",
        a_training_job("ranks.v2").obj(),
        "starting with a letter and ending with a letter or digit",
    ),
    Mistake(
        "inference service name its Service cannot take",  # found by tests/integration/test_spec_fuzzing.py
        an_inference_service("9lives").obj(),
        "starting with a letter and ending with a letter or digit: its Service and replica pods",
    ),
    Mistake(
        "expected duration beyond a year",
        a_training_job().set("expectedDurationSeconds", 10**12).obj(),
        "less than or equal to 31622400",
    ),
    Mistake(
        "run policy deadline beyond a year",
        a_training_job().set("runPolicy.activeDeadlineSeconds", 2**63 - 1).obj(),
        "less than or equal to 31622400",
    ),
    Mistake(
        "GPU type not a label value",
        a_training_job().gpu_type("NVIDIA H100").obj(),
        "should match",
        "should match pattern",
    ),
    Mistake(  # found by tests/integration/test_spec_fuzzing.py: the pods were refused at every launch
        "template label value too long",
        a_training_job().set("template.metadata.labels", {"team": "x" * 64}).obj(),
        "Too long",
        "must be a label value",
    ),
    Mistake(
        "node selector value not a label value",
        a_training_job().set("template.spec.nodeSelector", {"pool": "a b"}).obj(),
        "should match",
        "must be a label value",
    ),
    Mistake(
        "toleration with an unknown effect",
        a_training_job().set("template.spec.tolerations", [{"key": "gpu", "effect": "Never"}]).obj(),
        'Unsupported value: "Never"',
        "effect must be NoSchedule, PreferNoSchedule or NoExecute",
    ),
    Mistake(
        "node selector value not a string",
        a_training_job().set("template.spec.nodeSelector", {"pool": 1}).obj(),
        "must be of type string",
        "template.spec.nodeSelector[pool] must be a string",
    ),
    Mistake(
        "env entry without a name",
        a_training_job().set("template.spec.containers", [{"name": "t", "image": "i", "env": [{"value": "1"}]}]).obj(),
        "Required value",
        "template.spec.containers[0].env[0] needs name",
    ),
    Mistake(
        "template pins a node",
        a_training_job().set("template.spec.nodeName", "gpu-node-7").obj(),
        "template.spec.nodeName is not allowed",
    ),
    Mistake(
        "template holds its pods with scheduling gates",
        a_training_job().set("template.spec.schedulingGates", [{"name": "mine"}]).obj(),
        "template.spec.schedulingGates is not allowed",
    ),
    Mistake(
        "template joins a PodGroup of its own",
        a_training_job().set("template.spec.schedulingGroup", {"podGroupName": "mine"}).obj(),
        "template.spec.schedulingGroup is not allowed",
    ),
    Mistake(
        "template asks more GPUs than declared",
        a_training_job()
        .gpus(1)
        .set("template.spec.containers", [{"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}])
        .obj(),
        "may ask for nvidia.com/gpu only exactly gpusPerReplica",
    ),
    Mistake(
        "template requests more GPUs than declared, as a string",
        a_training_job()
        .gpus(2)
        .set(
            "template.spec.containers",
            [{"name": "t", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "4"}}}],
        )
        .obj(),
        "may ask for nvidia.com/gpu only exactly gpusPerReplica",
    ),
    Mistake(
        "template spreads GPUs over two containers",
        a_training_job()
        .gpus(1)
        .set(
            "template.spec.containers",
            [
                {"name": "a", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}},
                {"name": "b", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}},
            ],
        )
        .obj(),
        "only one container of the template may ask for nvidia.com/gpu",
    ),
    Mistake(
        "model server template pins a node",
        an_inference_service().set("template.spec.nodeName", "gpu-node-7").obj(),
        "template.spec.nodeName is not allowed",
    ),
    Mistake(
        "model server template asks more GPUs than declared",
        an_inference_service()
        .set("template.spec.containers", [{"name": "s", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}])
        .obj(),
        "may ask for nvidia.com/gpu only exactly gpusPerReplica",
    ),
    Mistake(
        "carbon region that could leave its string or its directory",
        a_training_job().set("carbon", {"region": '../GB"} or vector(0)'}).obj(),
        "should match",
        "should match pattern",
    ),
    Mistake(
        "priority above the maximum",
        a_training_job().priority(2_000_000_000).obj(),
        "less than or equal to 1000000000",
    ),
    Mistake(
        "negative backoff limit",
        a_training_job().set("runPolicy.backoffLimit", -1).obj(),
        "greater than or equal to 0",
    ),
    Mistake(
        "misspelt field",
        a_training_job().set("gpusPerReplicas", 2).obj(),
        'unknown field "spec.gpusPerReplicas"',
        "Extra inputs are not permitted",
    ),
    Mistake(
        "autoscaling min above max",
        an_inference_service().autoscale(5, 2, 10).obj(),
        "autoscaling.minReplicas must be <= maxReplicas",
    ),
    Mistake(
        "scale to zero not asked for",
        an_inference_service().autoscale(0, 2, 10).obj(),
        "autoscaling.minReplicas 0 needs scaleToZero: true",
    ),
    Mistake(
        "PromQL metric without a query",
        an_inference_service().autoscale(1, 2, 10).set("autoscaling.metric.type", "PromQL").obj(),
        "metric type PromQL needs metric.query",
    ),
    Mistake(
        "rollout that cannot progress",
        an_inference_service().set("rollout", {"maxSurge": 0, "maxUnavailable": 0}).obj(),
        "rollout.maxSurge and rollout.maxUnavailable cannot both be 0",
    ),
    Mistake("negative queue quota", a_queue(nominal_gpus=-4).obj(), "greater than or equal to 0"),
    Mistake(
        "GPU type quota above nominal",
        a_queue(nominal_gpus=8).set("gpuTypeQuotas", [{"gpuType": "NVIDIA-L4", "gpus": 16}]).obj(),
        "each gpuTypeQuotas entry must be <= nominalGPUs",
    ),
    Mistake("zero queue weight", a_queue().weight(0).obj(), "greater than or equal to 1"),
    Mistake("negative minimum run", a_queue().time_slicing(-1).obj(), "greater than or equal to 0"),
    *(Mistake(*mistake) for mistake in TEMPLATE_BOUNDS),
    Mistake(
        "fraction of a multi-GPU worker",
        a_training_job().gpus(2).gpu_share(computePercent=50).obj(),
        "gpuShare is a part of one GPU: gpusPerReplica must be 1",
    ),
    Mistake(
        "MIG profile the GPU type does not have",
        a_training_job().gpu_type("NVIDIA-A100-SXM4-40GB").gpu_share(migProfile="1g.10gb").obj(),
        "gpuShare.migProfile must be a profile gpuType has",
    ),
    Mistake(
        "MIG profile on a GPU without MIG",
        an_inference_service().set("gpuType", "NVIDIA-L4").gpu_share(migProfile="1g.10gb").obj(),
        "gpuShare.migProfile must be a profile gpuType has",
    ),
    Mistake(
        "no MIG profile of any model",
        a_training_job().gpu_share(migProfile="5g.50gb").obj(),
        "gpuShare.migProfile must be one of",
    ),
    Mistake(
        "fraction and MIG profile at once",
        an_inference_service().gpu_share(computePercent=50, migProfile="1g.10gb").obj(),
        "gpuShare asks for either a migProfile or a fraction",
    ),
    Mistake(
        "empty GPU share",
        a_training_job().gpu_share().obj(),
        "gpuShare asks for either a migProfile or a fraction",
    ),
    Mistake(
        "whole GPU in the template beside a share",
        a_training_job()
        .gpu_share(memoryMiB=20000)
        .set(
            "template",
            {"spec": {"containers": [{"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
        )
        .obj(),
        "with gpuShare no container of the template may ask for nvidia.com/gpu",
    ),
]
