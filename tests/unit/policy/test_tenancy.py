"""Which jobs a Queue takes: its bound namespaces, its priority cap and the tolerations it allows."""

from __future__ import annotations

import pytest

from aisched.policy.cluster import Taint, TaintEffect, Toleration, TolerationOperator
from aisched.policy.tenancy import (
    NAMESPACE_NOT_ALLOWED,
    PRIORITY_ABOVE_CAP,
    TOLERATION_NOT_ALLOWED,
    AllowedToleration,
    Tenancy,
)

EXISTS, EQUAL = TolerationOperator.EXISTS, TolerationOperator.EQUAL
TEAM_A_NODES = AllowedToleration("dedicated", "team-a", "NoSchedule")


def test_a_queue_without_tenancy_fields_takes_every_job() -> None:
    everything = Toleration(operator=EXISTS)
    assert Tenancy().refusal("default", "anyone", 10**9, [everything]) is None


def test_a_namespace_not_bound_to_the_queue_is_refused_with_the_ones_that_are() -> None:
    refused = Tenancy(namespaces=["team-b", "team-a"]).refusal("research", "intruder", 0, [])
    assert refused is not None and refused.reason == NAMESPACE_NOT_ALLOWED
    assert "namespace intruder is not bound to queue research (its namespaces: team-a, team-b)" in refused.message
    assert Tenancy(namespaces=["team-a"]).refusal("research", "team-a", 0, []) is None
    empty = Tenancy(namespaces=[]).refusal("closed", "team-a", 0, [])
    assert empty is not None and "(its namespaces: none)" in empty.message


def test_a_priority_above_the_queues_cap_is_refused_and_the_cap_itself_is_granted() -> None:
    refused = Tenancy(max_priority=100).refusal("research", "team-a", 101, [])
    assert refused is not None and refused.reason == PRIORITY_ABOVE_CAP
    assert "priority 101 is above the most queue research grants (100)" in refused.message
    assert Tenancy(max_priority=100).refusal("research", "team-a", 100, []) is None
    assert Tenancy(max_priority=-1).refusal("research", "team-a", -5, []) is None


@pytest.mark.parametrize(
    "toleration",
    [
        Toleration("dedicated", EQUAL, "team-a", TaintEffect.NO_SCHEDULE),
        Toleration("gpu-health", EXISTS, effect=TaintEffect.NO_EXECUTE),  # Exists: the entry names no value
        Toleration("gpu-health", EXISTS),  # every effect: the entry names none
    ],
)
def test_a_toleration_an_allowed_entry_covers_is_taken(toleration: Toleration) -> None:
    tenancy = Tenancy(allowed_tolerations=[TEAM_A_NODES, AllowedToleration("gpu-health")])
    assert tenancy.refusal("team-a", "team-a", 0, [toleration]) is None


@pytest.mark.parametrize(
    ("toleration", "shown"),
    [
        (Toleration("dedicated", EQUAL, "team-b", TaintEffect.NO_SCHEDULE), "dedicated=team-b:NoSchedule"),
        (Toleration("dedicated", EXISTS, effect=TaintEffect.NO_SCHEDULE), "dedicated:NoSchedule"),  # every value
        (Toleration("dedicated", EQUAL, "team-a"), "dedicated=team-a:*"),  # every effect, NoExecute too
        (Toleration(operator=EXISTS), "<every key>:*"),  # every taint of every node
        (Toleration("other", EXISTS), "other:*"),
    ],
)
def test_a_toleration_reaching_further_than_the_queue_allows_is_refused(toleration: Toleration, shown: str) -> None:
    tenancy = Tenancy(allowed_tolerations=[TEAM_A_NODES])
    refused = tenancy.refusal("team-a", "team-a", 0, [toleration])
    assert refused is not None and refused.reason == TOLERATION_NOT_ALLOWED
    assert f"template toleration {shown} reaches nodes queue team-a does not allow" in refused.message
    assert "(its allowedTolerations: dedicated=team-a:NoSchedule)" in refused.message


def test_an_empty_allowed_list_takes_only_jobs_without_tolerations() -> None:
    closed = Tenancy(allowed_tolerations=[])
    assert closed.refusal("q", "ns", 0, []) is None
    refused = closed.refusal("q", "ns", 0, [Toleration("spot", EXISTS)])
    assert refused is not None and "(its allowedTolerations: none)" in refused.message


def test_what_an_allowed_entry_covers_tolerates_no_taint_beyond_it() -> None:
    """The rule itself: any toleration an entry covers tolerates only taints the entry names."""
    entry = TEAM_A_NODES
    taints = [
        Taint(key, value, effect)
        for key in ("dedicated", "other")
        for value in ("team-a", "team-b", "")
        for effect in TaintEffect
    ]
    tolerations = [
        Toleration(key, operator, value, effect)
        for key in ("dedicated", "other", "")
        for operator in TolerationOperator
        for value in ("team-a", "team-b", "")
        for effect in (*TaintEffect, None)
    ]
    for toleration in tolerations:
        if entry.covers(toleration):
            for taint in taints:
                if toleration.tolerates(taint):
                    assert (taint.key, taint.value, taint.effect) == ("dedicated", "team-a", TaintEffect.NO_SCHEDULE)
