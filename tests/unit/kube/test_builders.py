from __future__ import annotations

from aisched.api import TrainingJob
from aisched.kube import labels
from aisched.kube.builders import GangLaunch, WorkerSlot, build_headless_service, build_worker_pod
from tests.builders import a_training_job


def _job(**changes: object) -> TrainingJob:
    builder = a_training_job("llm").replicas(2).gpus(8).namespace("team")
    for path, value in changes.items():
        builder.set(path, value)
    obj = builder.obj()
    obj["metadata"]["uid"] = "uid-1"
    return TrainingJob.model_validate(obj)


LAUNCH = GangLaunch(generation=3, world_size=2, slots=(WorkerSlot(0, "n1"), WorkerSlot(1, "n2")))


def _env(pod: dict[str, object]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]  # type: ignore[index]
    return {item["name"]: item["value"] for item in container["env"]}


def test_worker_pod_is_gated_pinned_and_owned() -> None:
    pod = build_worker_pod(_job(), LAUNCH, LAUNCH.slots[1])
    assert pod["metadata"]["name"] == "llm-g3-w1"
    assert pod["spec"]["schedulingGates"] == [{"name": labels.GANG_GATE}]
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "n2"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert pod["metadata"]["labels"][labels.GANG_GENERATION] == "3"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_a_lone_worker_is_neither_gated_nor_behind_a_service() -> None:
    launch = GangLaunch(generation=1, world_size=1, slots=(WorkerSlot(0, "n1"),))
    pod = build_worker_pod(_job(replicas=1), launch, launch.slots[0])
    assert "schedulingGates" not in pod["spec"]  # no other worker to wait for
    assert "subdomain" not in pod["spec"]
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "n1"
    assert _env(pod)["MASTER_ADDR"] == "localhost"
    assert _env(pod)["PET_NNODES"] == "1"
    assert _env(pod)["WORLD_SIZE"] == "8"  # processes: one per GPU


def test_workers_get_the_torchrun_environment() -> None:
    env = _env(build_worker_pod(_job(), LAUNCH, LAUNCH.slots[1]))
    assert env["MASTER_ADDR"] == "llm-worker-0.llm"
    assert env["WORLD_SIZE"] == "16"
    assert env["PET_NODE_RANK"] == env["NODE_RANK"] == "1"
    assert env["LOCAL_WORLD_SIZE"] == "8"
    assert "AISCHED_RESUME_STEP" not in env


def test_resume_point_and_interval_reach_the_workers() -> None:
    launch = GangLaunch(
        generation=4,
        world_size=1,
        slots=(WorkerSlot(0, "n1"),),
        checkpoint_interval_seconds=900,
        resume_step=1200,
        resume_path="/ckpt/1200",
    )
    env = _env(build_worker_pod(_job(**{"checkpoint.path": "/ckpt"}), launch, launch.slots[0]))
    assert env["AISCHED_RESUME_STEP"] == "1200"
    assert env["AISCHED_RESUME_PATH"] == "/ckpt/1200"
    assert env["AISCHED_CHECKPOINT_INTERVAL_SECONDS"] == "900"
    assert env["AISCHED_CHECKPOINT_DIR"] == "/ckpt"


def test_template_gpu_limits_and_user_env_are_kept() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "side", "image": "s"},
                {
                    "name": "main",
                    "image": "m",
                    "env": [{"name": "RANK", "value": "user"}, {"name": "MINE", "value": "x"}],
                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                },
            ]
        }
    }
    pod = build_worker_pod(_job(template=template), LAUNCH, LAUNCH.slots[0])
    side, main = pod["spec"]["containers"]
    assert "resources" not in side
    names = [item["name"] for item in main["env"]]
    assert names.count("RANK") == 1  # ours wins: the operator knows the rank
    assert "MINE" in names


def test_a_template_never_gets_more_gpus_than_the_job_declares() -> None:
    # The CRD refuses such templates for nvidia.com/gpu; the builder holds for any GPU resource,
    # and for objects that reached the operator some other way (changed in place below, past the model).
    job = _job()
    job.spec.template["spec"]["containers"] = [
        {"name": "side", "image": "s", "resources": {"requests": {"nvidia.com/gpu": 4, "cpu": "1"}}},
        {"name": "main", "image": "m", "resources": {"limits": {"nvidia.com/gpu": 64}}},
    ]
    side, main = build_worker_pod(job, LAUNCH, LAUNCH.slots[0])["spec"]["containers"]
    # The first container that named GPUs gets the job's 8, limits and requests; no other keeps any.
    assert side["resources"] == {"requests": {"cpu": "1", "nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}
    assert main["resources"] == {"limits": {}}


def test_headless_service_selects_every_worker() -> None:
    service = build_headless_service(_job())
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod = build_worker_pod(_job(), LAUNCH, LAUNCH.slots[0])
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]


def test_a_worker_keeps_karpenter_from_taking_its_node_whatever_the_template_says() -> None:
    # Consolidation or drift never takes a node under a running gang: only an interruption does,
    # and the gang checkpoints on that. A tenant's template cannot turn it off, and keeps its own.
    template = {
        "metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "false", "team": "x"}},
        "spec": {"containers": [{"name": "main", "image": "m"}]},
    }
    pod = build_worker_pod(_job(template=template), LAUNCH, LAUNCH.slots[0])
    annotations = pod["metadata"]["annotations"]
    assert annotations == {"karpenter.sh/do-not-disrupt": "true", "team": "x", labels.QUEUE_ANNOTATION: "default"}


def test_a_template_stored_before_the_reserved_key_rule_passes_none_of_the_operators_keys_on() -> None:
    # The CRD refuses aisched.io/ keys in a template now (api/reserved_keys.py); one admitted before
    # that still gets none onto its pods: the inventory reads a share and a job's name off them.
    job = _job()
    job.spec.template["metadata"] = {
        "labels": {labels.JOB_NAME: "someone-else", "team": "x"},
        "annotations": {"aisched.io/gpu-share": "0:1000:81920", "aisched.io/fake-exit": "Succeeded"},
    }
    pod = build_worker_pod(job, LAUNCH, LAUNCH.slots[0])
    assert pod["metadata"]["labels"][labels.JOB_NAME] == "llm" and pod["metadata"]["labels"]["team"] == "x"
    assert pod["metadata"]["annotations"] == {
        "aisched.io/fake-exit": "Succeeded",
        "karpenter.sh/do-not-disrupt": "true",
        labels.QUEUE_ANNOTATION: "default",  # the operator's own: the queue the worker is charged to
    }
