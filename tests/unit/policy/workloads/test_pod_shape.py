"""What one pod template asks: whole GPUs as kubelet counts them, one MIG instance, or a refusal."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.policy.taints import TaintEffect, Toleration, TolerationOperator
from aisched.policy.workloads.pod_shape import (
    PodShape,
    pod_gpus,
    pod_node_selector,
    pod_tolerations,
    read_pod_shape,
)


def template(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        pod["initContainers"] = list(init)
    return {"metadata": {"labels": {"app": "x"}}, "spec": pod}


def asks(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return {"name": "c", "image": "i", "resources": resources}


def test_whole_gpus_are_summed_over_containers_as_strings_or_numbers() -> None:
    assert pod_gpus(template(asks({"nvidia.com/gpu": "2"}), asks({"nvidia.com/gpu": 1}))) == (3, None)
    assert pod_gpus(template(asks({"cpu": "4"}), {"name": "sidecar"})) == (0, None)
    assert pod_gpus({}) == (0, None)


def test_limits_win_and_requests_alone_count() -> None:
    assert pod_gpus(template(asks({"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 2}))) == (4, None)
    assert pod_gpus(template(asks(requests={"nvidia.com/gpu": 2}))) == (2, None)


def test_init_containers_count_their_largest_when_more_than_the_containers_sum() -> None:
    init = (asks({"nvidia.com/gpu": 8}), asks({"nvidia.com/gpu": 2}))
    assert pod_gpus(template(asks({"nvidia.com/gpu": 1}), asks({"nvidia.com/gpu": 1}), init=init)) == (8, None)
    assert pod_gpus(template(asks({"nvidia.com/gpu": 4}), asks({"nvidia.com/gpu": 4}), init=init)) == (8, None)
    assert pod_gpus(template(asks({"nvidia.com/gpu": 5}), asks({"nvidia.com/gpu": 4}), init=init)) == (9, None)


def test_one_mig_instance_a_pod() -> None:
    assert pod_gpus(template(asks({"nvidia.com/mig-1g.10gb": "1"}), asks({"cpu": "1"}))) == (0, "1g.10gb")


@pytest.mark.parametrize(
    ("containers", "says"),
    [
        ([asks({"nvidia.com/mig-1g.10gb": 2})], "2 nvidia.com/mig-1g.10gb"),
        (
            [asks({"nvidia.com/mig-1g.10gb": 1}), asks({"nvidia.com/mig-2g.20gb": 1})],
            "template: each pod asks 1 nvidia.com/mig-1g.10gb, 1 nvidia.com/mig-2g.20gb; aisched places either",
        ),
        ([asks({"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu": 1})], "1 nvidia.com/gpu, 1 nvidia.com/mig-1g.10gb"),
        ([asks({"nvidia.com/mig-9g.1tb": 1})], "not a MIG profile"),
        ([asks({"nvidia.com/gpu.shared": 1})], "not this device"),
    ],
)
def test_mig_asks_aisched_cannot_place_are_refused(containers: list[dict[str, Any]], says: str) -> None:
    message = pod_gpus(template(*containers))
    assert isinstance(message, str) and says in message


@pytest.mark.parametrize("quantity", ["1.5", "500m", "-1", "", True, 1.5, None, [1], "1e3", 10**6])
def test_a_quantity_that_is_no_whole_number_of_devices_is_refused(quantity: Any) -> None:
    message = pod_gpus(template(asks({"nvidia.com/gpu": quantity})))
    assert message == (
        "template.spec.containers[0].resources.limits['nvidia.com/gpu'] "
        f"must be a whole number of devices, not {quantity!r}"
    )


def test_dra_claims_are_refused_as_not_yet_supported() -> None:
    claims = template(asks(), resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    message = pod_gpus(claims, where="spec.template")
    assert isinstance(message, str)
    assert message.startswith(
        "spec.template.spec.resourceClaims: DRA resource claims are not yet supported for this kind"
    )
    container_claim = template({"name": "c", "resources": {"claims": [{"name": "gpu"}]}})
    assert "resources.claims: DRA resource claims are not yet supported" in str(pod_gpus(container_claim))


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"spec": []}, "template.spec must be an object"),
        ({"spec": {"containers": {"name": "c"}}}, "template.spec.containers must be a list"),
        ({"spec": {"containers": ["c"]}}, "template.spec.containers[0] must be an object"),
        ({"spec": {"containers": [{"resources": "lots"}]}}, "template.spec.containers[0].resources must be an object"),
        (
            {"spec": {"containers": [{"resources": {"limits": [1]}}]}},
            "template.spec.containers[0].resources.limits must",
        ),
        ({"spec": {"initContainers": 3}}, "template.spec.initContainers must be a list"),
    ],
)
def test_a_template_of_the_wrong_types_is_refused_naming_the_field(pod: dict[str, Any], field: str) -> None:
    message = pod_gpus(pod)
    assert isinstance(message, str) and message.startswith(field)


def test_tolerations_are_read_and_bad_ones_refused() -> None:
    pod = template(
        asks(),
        tolerations=[
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute"},
            {"operator": "Exists"},
        ],
    )
    assert pod_tolerations(pod) == (
        Toleration("spot", TolerationOperator.EQUAL, "true", TaintEffect.NO_EXECUTE),
        Toleration("", TolerationOperator.EXISTS),
    )
    for bad, says in [
        ({"key": 7}, "template.spec.tolerations[0].key must be a string"),
        ({"operator": "Maybe"}, "template.spec.tolerations[0].operator must be Equal or Exists"),
        ({"effect": "NoWay"}, "template.spec.tolerations[0].effect must be one of"),
        ("spot", "template.spec.tolerations[0] must be an object"),
    ]:
        message = pod_tolerations(template(asks(), tolerations=[bad]))
        assert isinstance(message, str) and message.startswith(says)


def test_node_selector_is_strings_to_strings() -> None:
    assert pod_node_selector(template(asks(), nodeSelector={"nvidia.com/gpu.product": "H100"})) == {
        "nvidia.com/gpu.product": "H100"
    }
    assert pod_node_selector(template(asks(), nodeSelector={"zone": 3})) == (
        "template.spec.nodeSelector['zone'] must be a string, not 3"
    )


def test_the_whole_shape_at_once() -> None:
    selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod = template(asks({"nvidia.com/gpu": 2}), tolerations=[{"operator": "Exists"}], nodeSelector=selector)
    assert read_pod_shape(pod) == PodShape(2, None, (Toleration("", TolerationOperator.EXISTS),), selector)
    cpu_only = template(asks({}), nodeSelector={"a": "b"})  # a pod of no GPU goes wherever kube-scheduler puts it
    assert read_pod_shape(cpu_only) == PodShape(0, None, (), {"a": "b"})
    assert read_pod_shape([]) == "template must be an object, not []"


def test_a_gpu_pod_that_would_rule_out_the_node_it_is_pinned_to_is_refused() -> None:
    """A node selector no node meets froze every free GPU for the operator's reservations (#36 hostile tenant)."""
    refused = read_pod_shape(template(asks({"nvidia.com/gpu": 1}), nodeSelector={"foo": "bar"}))
    assert isinstance(refused, str) and "nodeSelector" in refused and "'foo'" in refused
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "In", "values": ["y"]}]}]}
    pinned = template(
        asks({"nvidia.com/gpu": 1}),
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
    )
    assert isinstance(read_pod_shape(pinned), str)


def test_sidecar_gpus_add_to_the_containers_as_kube_scheduler_sums_them() -> None:
    """A restartable init container runs beside the app containers: 2 + 2 GPUs held, 4 charged (#36 hostile tenant)."""
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "2"}}}
    template = {
        "spec": {
            "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always", **gpu}],
            "containers": [{"name": "main", "image": "x", **gpu}],
        }
    }
    assert pod_gpus(template) == (4, None)
    template["spec"]["initContainers"][0].pop("restartPolicy")  # an ordinary init container runs alone
    assert pod_gpus(template) == (2, None)
