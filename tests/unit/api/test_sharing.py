"""gpuShare: the models and the generated CRD (schema + CEL) agree on every generated spec, and the data agree."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from aisched.api import InferenceService, TrainingJob
from aisched.api.crd import all_crds
from aisched.api.sharing import ALL_MIG_PROFILES, GPU_MODELS, MIG_KINDS, MIG_PROFILES, mig_milli, mig_profiles_of
from aisched.policy.sharing.mig import MIG_MODELS
from tests.builders import DEFAULT_TEMPLATE
from tests.unit.api.server_like import server_rejections

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
_GPU_TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


@st.composite
def shared_specs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["TrainingJob", "InferenceService"]))
    share = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "computePercent": st.integers(min_value=0, max_value=100),
                "memoryMiB": st.integers(min_value=0, max_value=4),
                "migProfile": st.sampled_from([*ALL_MIG_PROFILES[:4], "7g.80gb", "5g.5gb", ""]),
            },
        )
    )
    spec: dict[str, Any] = {
        "gpusPerReplica": draw(st.integers(min_value=1, max_value=3)),
        "template": draw(st.sampled_from([DEFAULT_TEMPLATE, _GPU_TEMPLATE])),
    }
    if draw(st.booleans()):
        spec["gpuShare"] = share
    gpu_type = draw(st.sampled_from([None, "NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"]))
    if gpu_type:
        spec["gpuType"] = gpu_type
    return {"apiVersion": "aisched.io/v1alpha1", "kind": kind, "metadata": {"name": "s"}, "spec": spec}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_specs())
def test_models_and_crd_agree_on_gpu_shares(obj: dict[str, Any]) -> None:
    model = TrainingJob if obj["kind"] == "TrainingJob" else InferenceService
    try:
        model.model_validate(obj)
        accepted = True
    except ValidationError:
        accepted = False
    server_errors = server_rejections(CRDS[obj["kind"]], obj)
    assert accepted == (not server_errors), server_errors


def test_a_fraction_and_a_mig_profile_are_accepted() -> None:
    job = TrainingJob.model_validate(
        {
            "metadata": {"name": "a"},
            "spec": {"gpusPerReplica": 1, "template": DEFAULT_TEMPLATE, "gpuShare": {"computePercent": 25}},
        }
    )
    assert job.spec.gpu_share is not None and job.spec.gpu_share.compute_percent == 25
    service = InferenceService.model_validate(
        {
            "metadata": {"name": "a"},
            "spec": {
                "gpusPerReplica": 1,
                "gpuType": "NVIDIA-H100-80GB-HBM3",
                "template": DEFAULT_TEMPLATE,
                "gpuShare": {"migProfile": "3g.40gb"},
            },
        }
    )
    assert service.to_wire()["spec"]["gpuShare"] == {"migProfile": "3g.40gb"}


def test_profile_tables_agree_with_the_packers() -> None:
    for model, names in MIG_PROFILES.items():
        assert [name.split(".")[0] for name in names] == list(MIG_KINDS)
        assert [MIG_MODELS[model][kind].name for kind in MIG_KINDS] == list(names)
    assert set(GPU_MODELS.values()) <= set(MIG_PROFILES)
    assert mig_profiles_of("NVIDIA-L4") == ()
    assert mig_profiles_of("NVIDIA-A100-SXM4-40GB")[0] == "1g.5gb"


def test_seven_1g_instances_are_charged_at_least_one_gpu_and_7g_exactly_one() -> None:
    assert mig_milli("7g.80gb") == 1000
    assert 7 * mig_milli("1g.10gb") >= 1000
    assert [mig_milli(p) for p in MIG_PROFILES["H100-80GB"]] == [143, 286, 429, 572, 1000]
