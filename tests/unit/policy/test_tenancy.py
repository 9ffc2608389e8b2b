"""Which jobs a Queue takes: its bound namespaces and its priority cap."""

from __future__ import annotations

from aisched.policy.tenancy import NAMESPACE_NOT_ALLOWED, PRIORITY_ABOVE_CAP, refusal


def test_a_queue_without_tenancy_fields_takes_every_job() -> None:
    assert refusal("anyone", 10**9, "default", None, None) is None


def test_a_namespace_not_bound_to_the_queue_is_refused_with_the_ones_that_are() -> None:
    refused = refusal("intruder", 0, "research", ["team-b", "team-a"], None)
    assert refused is not None and refused.reason == NAMESPACE_NOT_ALLOWED
    assert "namespace intruder is not bound to queue research (its namespaces: team-a, team-b)" in refused.message
    assert refusal("team-a", 0, "research", ["team-a"], None) is None
    empty = refusal("team-a", 0, "closed", [], None)
    assert empty is not None and "(its namespaces: none)" in empty.message


def test_a_priority_above_the_queues_cap_is_refused_and_the_cap_itself_is_granted() -> None:
    refused = refusal("team-a", 101, "research", None, 100)
    assert refused is not None and refused.reason == PRIORITY_ABOVE_CAP
    assert "priority 101 is above the most queue research grants (100)" in refused.message
    assert refusal("team-a", 100, "research", None, 100) is None
    assert refusal("team-a", -5, "research", None, -1) is None
