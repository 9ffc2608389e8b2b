"""Objects of the kinds aisched reads, written the way their projects' own examples write them.

Each function returns a fresh object (the API server's JSON, as a dict), labelled for QUEUE, that a
test then changes where it matters: training-operator's `examples/pytorch/simple.yaml` PyTorchJob,
KubeRay's `ray-job.sample.yaml` RayJob, the Kubernetes docs' Indexed Job, vLLM's Deployment, and
the plain pods of a group. `at(obj, "spec.template.spec")` reaches into one to change it.
"""

from __future__ import annotations

from typing import Any

from aisched.policy.workloads.model import POD_GROUP_LABEL, POD_GROUP_SIZE_ANNOTATION, QUEUE_LABEL

QUEUE = "team-a"
CREATED = "2026-01-01T00:00:00Z"


def metadata(name: str, namespace: str = "ml", *, queue: str | None = QUEUE, uid: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "creationTimestamp": CREATED,
        "labels": {QUEUE_LABEL: queue} if queue is not None else {},
        "annotations": {},
    }


def container(name: str, image: str, gpus: int | str | None = None, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "image": image, **fields}
    if gpus is not None:
        entry["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return entry


def pytorch_simple(master_gpus: int = 8, worker_gpus: int = 8, workers: int = 1) -> dict[str, Any]:
    """training-operator's examples/pytorch/simple.yaml, asking GPUs."""

    def replica(replicas: int, gpus: int) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "spec": {
                    "containers": [
                        container(
                            "pytorch",
                            "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                            gpus,
                            imagePullPolicy="Always",
                            command=["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
                        )
                    ]
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata("pytorch-simple", "kubeflow"),
        "spec": {"pytorchReplicaSpecs": {"Worker": replica(workers, worker_gpus), "Master": replica(1, master_gpus)}},
    }


def ray_cluster_spec(worker_gpus: int = 1) -> dict[str, Any]:
    """The rayClusterSpec of KubeRay's ray-job.sample.yaml: a head without GPUs and one small worker group."""
    image = "rayproject/ray:2.46.0"
    return {
        "rayVersion": "2.46.0",
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": image,
                            "ports": [
                                {"containerPort": 6379, "name": "gcs-server"},
                                {"containerPort": 8265, "name": "dashboard"},
                                {"containerPort": 10001, "name": "client"},
                            ],
                            "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}},
                        }
                    ]
                }
            },
        },
        "workerGroupSpecs": [
            {
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 5,
                "groupName": "small-group",
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-worker",
                                "image": image,
                                "resources": {
                                    "limits": {"cpu": "1", "nvidia.com/gpu": str(worker_gpus)},
                                    "requests": {"cpu": "200m"},
                                },
                            }
                        ]
                    }
                },
            }
        ],
    }


def ray_job_sample() -> dict[str, Any]:
    """KubeRay's ray-job.sample.yaml, its worker asking one GPU, and its cluster going when it ends (the sample
    leaves that commented out; KubeRay suspends, and aisched so holds, only such RayJobs)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata("rayjob-sample"),
        "spec": {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "runtimeEnvYAML": (
                "pip:\n  - requests==2.26.0\n  - pendulum==2.1.2\nenv_vars:\n  counter_name: test_counter\n"
            ),
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": ray_cluster_spec(),
        },
    }


def ray_cluster() -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata("raycluster-kuberay"),
        "spec": ray_cluster_spec(),
    }


def indexed_job(completions: int = 5, parallelism: int = 3, gpus: int | str = 1) -> dict[str, Any]:
    """The Kubernetes docs' Indexed Job (job/indexed-job.yaml), its worker asking GPUs."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata("indexed-job"),
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "input",
                            "image": "docker.io/library/bash",
                            "command": [
                                "bash",
                                "-c",
                                "items=(foo bar baz qux xyz); echo ${items[$JOB_COMPLETION_INDEX]} > /input/data.txt",
                            ],
                        }
                    ],
                    "containers": [
                        container("worker", "docker.io/library/busybox", gpus, command=["rev", "/input/data.txt"])
                    ],
                }
            },
        },
    }


def vllm_deployment(replicas: int = 2) -> dict[str, Any]:
    """vLLM's Kubernetes deployment example: one GPU a replica."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata("mistral-7b"),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "mistral-7b"}},
            "template": {
                "metadata": {"labels": {"app": "mistral-7b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "mistral-7b",
                            "image": "vllm/vllm-openai:latest",
                            "command": ["/bin/sh", "-c"],
                            "args": [
                                "vllm serve mistralai/Mistral-7B-Instruct-v0.3 "
                                "--trust-remote-code --enable-chunked-prefill"
                            ],
                            "ports": [{"containerPort": 8000}],
                            "resources": {
                                "limits": {"cpu": "10", "memory": "20G", "nvidia.com/gpu": "1"},
                                "requests": {"cpu": "2", "memory": "6G", "nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def group_pod(
    name: str, group: str | None = "allreduce", size: int | str = 2, gpus: int = 8, created: str = CREATED
) -> dict[str, Any]:
    """A plain pod of a group (POD_GROUP_LABEL), or a pod alone when GROUP is None."""
    meta = metadata(name, uid=f"uid-{name}")
    meta["creationTimestamp"] = created
    if group is not None:
        meta["labels"][POD_GROUP_LABEL] = group
        meta["annotations"][POD_GROUP_SIZE_ANNOTATION] = str(size)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container("trainer", "nvcr.io/nvidia/pytorch:24.05-py3", gpus)]},
    }


def at(obj: dict[str, Any], path: str) -> Any:
    """The part of OBJ at dotted PATH (list indices as numbers): `at(job, "spec.template.spec")`."""
    node: Any = obj
    for step in path.split("."):
        node = node[int(step)] if isinstance(node, list) else node[step]
    return node
