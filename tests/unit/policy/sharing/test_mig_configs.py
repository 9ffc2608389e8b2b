"""The live cluster's MIG rules: stock configs valid for their model, packing, and repartitions of idle nodes only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.sharing.mig import MIG_MODELS, is_valid
from aisched.policy.sharing.mig_configs import (
    DISABLED,
    MigNode,
    choose_config,
    config_layout,
    config_names,
    instances,
    place_instances,
    plan_repartition,
)

models = st.sampled_from(sorted(MIG_MODELS))


def profiles_of(model: str) -> list[str]:
    return [p.name for p in MIG_MODELS[model].values()]


@given(models)
def test_every_stock_config_is_a_valid_layout_of_its_model(model: str) -> None:
    for config in config_names(model):
        layout = config_layout(model, config)
        assert layout is not None and is_valid(layout, MIG_MODELS[model]), config
    assert config_layout(model, DISABLED) == ()
    assert config_layout(model, "all-9g.1000gb") is None


def test_the_stock_configs_give_nvidias_instance_counts() -> None:
    h100 = {c: instances("H100-80GB", c, 1) for c in config_names("H100-80GB")}
    assert h100["all-1g.10gb"] == {"1g.10gb": 7}
    assert h100["all-2g.20gb"] == {"2g.20gb": 3}
    assert h100["all-3g.40gb"] == {"3g.40gb": 2}
    assert h100["all-balanced"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert instances("A100-40GB", "all-1g.5gb", 8) == {"1g.5gb": 56}


@settings(max_examples=100)
@given(models, st.data())
def test_the_chosen_config_holds_the_profile_asked_and_is_valid(model: str, data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(profiles_of(model)))
    demand = data.draw(st.dictionaries(st.sampled_from(profiles_of(model)), st.integers(1, 50), max_size=5))
    config = choose_config(model, profile, demand)
    assert profile in instances(model, config, 1)
    layout = config_layout(model, config)
    assert layout is not None and is_valid(layout, MIG_MODELS[model])


def _node(name: str, **fields: object) -> MigNode:
    defaults: dict[str, object] = {"model": "H100-80GB", "gpus": 8, "config": "all-1g.10gb", "applied": True}
    defaults |= {"allocatable": {"1g.10gb": 56}}
    return MigNode(name, **(defaults | fields))  # type: ignore[arg-type]


def test_instances_are_packed_on_the_node_with_fewest_free() -> None:
    nodes = [_node("a", used={"1g.10gb": 50}), _node("b"), _node("c", applied=False)]
    assert place_instances(nodes, "1g.10gb", 7) == ["a"] * 6 + ["b"]
    assert place_instances(nodes, "3g.40gb", 1) is None
    assert place_instances([_node("a", schedulable=False)], "1g.10gb", 1) is None


node_states = st.builds(
    MigNode,
    name=st.sampled_from(["n1", "n2", "n3", "n4"]),
    model=models,
    gpus=st.integers(1, 8),
    config=st.sampled_from([None, "all-disabled", "all-1g.10gb", "all-balanced", "all-1g.5gb"]),
    applied=st.booleans(),
    gpu_holders=st.integers(0, 3),
    schedulable=st.booleans(),
)


@settings(max_examples=200)
@given(st.lists(node_states, max_size=6, unique_by=lambda n: n.name), st.data())
def test_a_repartition_only_ever_takes_an_idle_managed_node_to_a_valid_config_with_the_profile(
    nodes: list[MigNode], data: st.DataObject
) -> None:
    model = data.draw(models)
    profile = data.draw(st.sampled_from(profiles_of(model)))
    plan = plan_repartition(nodes, profile, data.draw(st.integers(1, 60)), {profile: 1})
    if plan is None:
        return
    node = next(n for n in nodes if n.name == plan.node)
    assert node.gpu_holders == 0, "never under a running pod"
    assert node.config is not None and node.applied and node.schedulable
    assert profile in instances(node.model, plan.config, 1) and plan.config != node.config
    layout = config_layout(node.model, plan.config)
    assert layout is not None and is_valid(layout, MIG_MODELS[node.model])


def test_the_idle_node_is_repartitioned_and_the_busy_one_never() -> None:
    busy, idle = _node("busy", gpu_holders=1), _node("idle")
    plan = plan_repartition([busy, idle], "3g.40gb", 1, {"3g.40gb": 1})
    assert plan is not None and (plan.node, plan.config) == ("idle", "all-3g.40gb")
    assert plan_repartition([busy], "3g.40gb", 1, {"3g.40gb": 1}) is None
    # Demand for several profiles: the balanced config serves more of it than all-3g.
    mixed = plan_repartition([idle], "3g.40gb", 1, {"3g.40gb": 1, "1g.10gb": 2, "2g.20gb": 1})
    assert mixed is not None and mixed.config == "all-balanced"
    # No MIG manager there (no config label): never relabelled.
    assert plan_repartition([_node("free", config=None)], "3g.40gb", 1, {"3g.40gb": 1}) is None
    # A profile of another model.
    assert plan_repartition([_node("a100", model="A100-40GB")], "3g.40gb", 1, {"3g.40gb": 1}) is None
