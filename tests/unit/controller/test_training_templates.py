"""A large pod template is kept without its process settings, and read again for the launch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.controller.templates import KEPT_TEMPLATE_BYTES, elided, template_bytes
from aisched.policy.pod_policy import AllowedHostPath, PodPolicy, PodSecurityLevel
from tests.builders import a_training_job
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import a_controller, a_node, reconcile_errors

_ENV = [{"name": f"SETTING_{i}", "value": "v" * 200} for i in range(200)]  # ~45 KiB of JSON


def a_large_job(name: str = "big", generation: int = 1) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "trainer:v1",
        "env": _ENV,
        "args": ["--flag"] * 100,
        "securityContext": {"privileged": False},
        "resources": {"limits": {"nvidia.com/gpu": 4}},
        "readinessProbe": {"exec": {"command": ["true"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},  # the kubelet's, not the placement's
    }
    job = (
        a_training_job(name)
        .namespace("ns")
        .gpus(4)
        .set("template.metadata", {"labels": {"team": "a"}, "annotations": {"note": "x" * 100}})
        .set("template.spec.containers", [container])
        .set("template.spec.tolerations", [{"key": "gpu", "operator": "Exists"}])
        .set("template.spec.hostNetwork", False)
        .obj()
    )
    job["metadata"].update(uid=f"uid-{name}", generation=generation)
    return job


def test_a_large_template_keeps_the_annotations_its_queues_pod_policy_reads() -> None:
    """An unconfined AppArmor or seccomp profile in a large template is still seen by the pod policy."""
    job = a_large_job()
    profiles = {
        "container.apparmor.security.beta.kubernetes.io/trainer": "unconfined",
        "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
    }
    job["spec"]["template"]["metadata"]["annotations"].update(profiles)
    kept = elided(job)
    assert kept is not None
    assert kept["spec"]["template"]["metadata"]["annotations"] == profiles


def test_a_template_of_a_usual_size_is_kept_whole() -> None:
    assert elided(a_training_job().obj()) is None


def test_a_large_template_is_kept_without_what_only_the_pods_need() -> None:
    job = a_large_job()
    assert template_bytes(job["spec"]["template"]) > KEPT_TEMPLATE_BYTES
    kept = elided(job)
    assert kept is not None
    template = kept["spec"]["template"]
    assert template["spec"]["containers"] == [
        {
            "name": "trainer",
            "image": "trainer:v1",
            "securityContext": {"privileged": False},
            "resources": {"limits": {"nvidia.com/gpu": 4}},
        }
    ]
    assert template["spec"]["tolerations"] == job["spec"]["template"]["spec"]["tolerations"]
    assert "hostNetwork" in template["spec"]
    assert template["metadata"] == {"labels": {"team": "a"}, "annotations": {}}
    assert template_bytes(template) < 1024
    assert job == a_large_job(), "the watch's object is left as it was"


def test_a_large_template_keeps_of_its_pod_spec_what_the_policy_and_placement_read() -> None:
    job = a_large_job()
    spec = job["spec"]["template"]["spec"]
    term = {"matchExpressions": [{"key": "k", "operator": "In", "values": [""] * 64}] * 64}
    spec["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    spec["dnsConfig"] = {"options": [{}] * 64}
    spec["terminationGracePeriodSeconds"] = 300
    spec["volumes"] = [
        {"name": "data", "projected": {"sources": [{}] * 64}},
        {"name": "host", "hostPath": {"path": "/etc", "type": "Directory"}},
    ]
    kept = elided(job)
    assert kept is not None
    pod = kept["spec"]["template"]["spec"]
    assert "affinity" not in pod and "dnsConfig" not in pod  # only the pods need them
    assert pod["terminationGracePeriodSeconds"] == 300 and pod["hostNetwork"] is False  # scalars stay
    # The pod policy reads a volume's kind, and a hostPath's path.
    assert pod["volumes"] == [
        {"name": "data", "projected": {}},
        {"name": "host", "hostPath": {"path": "/etc", "type": "Directory"}},
    ]
    assert template_bytes(kept["spec"]["template"]) < 1024


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_launch_of_a_job_kept_without_its_env_reads_it_again_and_builds_the_pods_with_it(
    kube: KubeDouble,
) -> None:
    stored = a_large_job()
    kube.allow("patch_status", "post_event", "create").answer("get_custom", lambda *_: copy.deepcopy(stored))
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(copy.deepcopy(stored))
    assert "env" not in controller.jobs[("ns", "big")]["spec"]["template"]["spec"]["containers"][0]
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert kube.calls("get_custom") == [("trainingjobs", "ns", "big")]
    (pod,) = (obj for (obj,) in kube.calls("create"))
    (container,) = pod["spec"]["containers"]
    assert {e["name"] for e in _ENV} <= {e["name"] for e in container["env"]}
    assert container["args"] == ["--flag"] * 100
    assert reconcile_errors(controller) == 0


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_launch_waits_when_the_job_changed_since_it_was_placed(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create").answer("get_custom", lambda *_: a_large_job(generation=2))
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_large_job(generation=1))
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert kube.calls("create") == []
    assert reconcile_errors(controller) == 1  # retried with backoff, or at once on the watch's new spec


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_large_template_the_model_refuses_is_kept_whole_to_say_why(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    job = a_large_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "1=bad", "value": "x"})
    controller = a_controller(kube)
    controller.job_seen(copy.deepcopy(job))
    assert controller.jobs[("ns", "big")]["spec"]["template"] == job["spec"]["template"]
    assert controller.store.refusal(controller.jobs[("ns", "big")]) is not None


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_deleted_job_forgets_its_template_was_left_out(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    controller.job_seen(a_large_job())
    controller.job_gone("ns", "big")
    assert controller.store.elided_templates == set()


_PADDING = [{"name": f"PAD_{i}", "value": "v" * 200} for i in range(100)]  # over KEPT_TEMPLATE_BYTES
_CONTAINER_PARTS = st.fixed_dictionaries(
    {
        "ports": st.lists(
            st.fixed_dictionaries({"containerPort": st.integers(1, 3)}, optional={"hostPort": st.integers(0, 3)}),
            max_size=4,
        ),
        "volumeMounts": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["host-data", "host-etc", "scratch"]), "mountPath": st.just("/m")},
                optional={"readOnly": st.booleans()},
            ),
            max_size=4,
        ),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "add": st.lists(st.sampled_from(["NET_ADMIN", "SYS_ADMIN", "CHOWN", "KILL", "NET_BIND_SERVICE"])),
                "drop": st.lists(st.sampled_from(["ALL", "CHOWN", "KILL"])),
            },
        ),
    }
)
_POLICIES = st.builds(
    PodPolicy,
    level=st.sampled_from(list(PodSecurityLevel)),
    allow_host_ports=st.booleans(),
    allowed_host_paths=st.lists(
        st.builds(AllowedHostPath, st.sampled_from(["/data", "/etc", "/"]), st.booleans()), max_size=2
    ).map(tuple),
    allowed_capabilities=st.frozensets(st.sampled_from(["NET_ADMIN", "SYS_ADMIN"])),
    allowed_volume_types=st.frozensets(st.sampled_from(["hostPath", "emptyDir"])),
)


def _container(index: int, parts: dict[str, Any]) -> dict[str, Any]:
    context = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if parts["capabilities"]:
        context["capabilities"] = parts["capabilities"]
    container = {"name": f"c{index}", "image": "trainer:v1", "env": _PADDING, "securityContext": context}
    return {**container, "ports": parts["ports"], "volumeMounts": parts["volumeMounts"]}


@given(
    containers=st.lists(_CONTAINER_PARTS, min_size=1, max_size=3),
    init_containers=st.lists(_CONTAINER_PARTS, max_size=2),
    policy=_POLICIES,
)
def test_the_pod_policy_refuses_a_large_template_kept_as_it_refuses_it_whole(
    containers: list[dict[str, Any]], init_containers: list[dict[str, Any]], policy: PodPolicy
) -> None:
    """What the record keeps of ports, mounts and capabilities is enough for the same verdict, on the same kind."""
    job = a_training_job("big").namespace("ns").gpus(1).obj()
    spec = job["spec"]["template"]["spec"]
    spec["containers"] = [_container(i, parts) for i, parts in enumerate(containers)]
    spec["initContainers"] = [_container(10 + i, parts) for i, parts in enumerate(init_containers)]
    spec["volumes"] = [
        {"name": "host-data", "hostPath": {"path": "/data/set"}},
        {"name": "host-etc", "hostPath": {"path": "/etc"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    kept = elided(job)
    assert kept is not None
    whole, left = policy.violation(job["spec"]["template"]), policy.violation(kept["spec"]["template"])
    assert (whole and (whole.what, whole.allowance)) == (left and (left.what, left.allowance))
