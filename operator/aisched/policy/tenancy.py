"""Which jobs a Queue takes: the namespaces bound to it, and the highest priority it grants.

A Queue names the namespaces whose jobs it takes (`spec.namespaces`; unset, any) rather than
selecting them by label: a selector would need the operator to read every namespace, and a
tenant who may label its own namespace could bind it to any queue. A list is written by whoever
writes the Queue (a cluster-scoped object, so a cluster administrator). A queue's `maxPriority`
caps what its jobs may ask for, so a tenant cannot preempt others by asking more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
PRIORITY_ABOVE_CAP = "PriorityAboveQueueCap"


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def refusal(
    namespace: str, priority: int, queue: str, namespaces: Sequence[str] | None, max_priority: int | None
) -> Refusal | None:
    """Why `queue` does not take a job of `namespace` asking for `priority`; None when it does."""
    if namespaces is not None and namespace not in namespaces:
        allowed = ", ".join(sorted(namespaces)) or "none"
        return Refusal(
            NAMESPACE_NOT_ALLOWED,
            f"namespace {namespace} is not bound to queue {queue} (its namespaces: {allowed}); "
            "ask a cluster administrator to add it, or name another queue",
        )
    if max_priority is not None and priority > max_priority:
        return Refusal(
            PRIORITY_ABOVE_CAP,
            f"priority {priority} is above the most queue {queue} grants ({max_priority}); lower spec.priority",
        )
    return None
