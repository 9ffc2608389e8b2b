"""Which jobs a Queue takes: its bound namespaces, the highest priority it grants, and the
tolerations it lets a job's pods carry.

A Queue names the namespaces whose jobs it takes (`spec.namespaces`; unset, any) rather than
selecting them by label: a selector would need the operator to read every namespace, and a
tenant who may label its own namespace could bind it to any queue. A list is written by whoever
writes the Queue (a cluster-scoped object, so a cluster administrator). A queue's `maxPriority`
caps what its jobs may ask for, so a tenant cannot preempt others by asking more.

Nodes set aside for a team carry a taint only that team's pods tolerate. A toleration is
written by the tenant in the pod template, so a queue that lists `allowedTolerations` takes a
job only if each of its template's tolerations is one the list covers: a tenant of another
queue cannot reach those nodes by tolerating their taint (nor every node, with an empty key).

Whatever else the template asks beyond compute (privilege, host namespaces, host paths, another
ServiceAccount) is the queue's `podPolicy` (`policy.pod_policy`), restrictive by default: the
operator creates the pods, so without it a tenant would get more than creating them itself would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.policy.cluster import Toleration, TolerationOperator
from aisched.policy.pod_policy import DEFAULT_POD_POLICY, POD_POLICY_VIOLATION, PodPolicy, pod_policy_from_wire

NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
PRIORITY_ABOVE_CAP = "PriorityAboveQueueCap"
TOLERATION_NOT_ALLOWED = "TolerationNotAllowed"


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class AllowedToleration:
    """A toleration a queue's jobs may carry: of taint KEY, of VALUE only (unset: any value) and of
    EFFECT only (unset: any effect)."""

    key: str
    value: str | None = None
    effect: str | None = None

    def covers(self, toleration: Toleration) -> bool:
        """Whether TOLERATION tolerates no taint this entry does not allow."""
        if not toleration.key or toleration.key != self.key:  # an empty key tolerates every taint
            return False
        if self.value is not None and (
            toleration.operator == TolerationOperator.EXISTS or toleration.value != self.value
        ):
            return False  # Exists tolerates every value of the key
        return self.effect is None or (toleration.effect is not None and toleration.effect.value == self.effect)

    def __str__(self) -> str:
        value = f"={self.value}" if self.value is not None else ""
        return f"{self.key}{value}:{self.effect or '*'}"


@dataclass(frozen=True)
class Tenancy:
    """What a queue lets in: None in a field lets anything through it; the pod policy has a default."""

    namespaces: Sequence[str] | None = None
    max_priority: int | None = None
    allowed_tolerations: Sequence[AllowedToleration] | None = field(default=None)
    pod_policy: PodPolicy = DEFAULT_POD_POLICY

    def refusal(
        self,
        queue: str,
        namespace: str,
        priority: int | None,
        tolerations: Sequence[Toleration],
        template: Mapping[str, Any] | None = None,
    ) -> Refusal | None:
        """Why QUEUE does not take a job of NAMESPACE asking for PRIORITY (None: a kind without one)
        whose pods carry TOLERATIONS and are made from TEMPLATE (None: not checked); None when it does."""
        if self.namespaces is not None and namespace not in self.namespaces:
            allowed = ", ".join(sorted(self.namespaces)) or "none"
            return Refusal(
                NAMESPACE_NOT_ALLOWED,
                f"namespace {namespace} is not bound to queue {queue} (its namespaces: {allowed}); "
                "ask a cluster administrator to add it, or name another queue",
            )
        if self.max_priority is not None and priority is not None and priority > self.max_priority:
            return Refusal(
                PRIORITY_ABOVE_CAP,
                f"priority {priority} is above the most queue {queue} grants ({self.max_priority}); "
                "lower spec.priority",
            )
        if self.allowed_tolerations is not None:
            for toleration in tolerations:
                if not any(allowed.covers(toleration) for allowed in self.allowed_tolerations):
                    allowed_ones = ", ".join(str(a) for a in self.allowed_tolerations) or "none"
                    return Refusal(
                        TOLERATION_NOT_ALLOWED,
                        f"template toleration {_described(toleration)} reaches nodes queue {queue} does not allow "
                        f"(its allowedTolerations: {allowed_ones}); remove it, or name another queue",
                    )
        if template is not None and (violation := self.pod_policy.violation(template)) is not None:
            return Refusal(POD_POLICY_VIOLATION, violation.message(queue, self.pod_policy.level))
        return None


def _described(toleration: Toleration) -> str:
    key = toleration.key or "<every key>"
    value = "" if toleration.operator == TolerationOperator.EXISTS else f"={toleration.value}"
    return f"{key}{value}:{toleration.effect.value if toleration.effect else '*'}"


def tenancy_from_wire(spec: Any) -> Tenancy:
    """A Queue's tenancy fields as stored (its `spec`; None for a queue that does not exist), read
    as far as they go: an unreadable namespace list or cap binds or caps nothing, so it stops no
    job; an unreadable list of allowed tolerations allows none, since it was written to fence
    nodes off; an unreadable pod policy allows what the default allows."""
    spec = spec if isinstance(spec, Mapping) else {}
    namespaces = spec.get("namespaces")
    if not (isinstance(namespaces, list) and all(isinstance(n, str) for n in namespaces)):
        namespaces = None
    cap = spec.get("maxPriority")
    if isinstance(cap, bool) or not isinstance(cap, int):
        cap = None
    return Tenancy(
        namespaces,
        cap,
        _allowed_tolerations(spec.get("allowedTolerations")),
        pod_policy_from_wire(spec.get("podPolicy")),
    )


def template_tolerations(template: Mapping[str, Any]) -> list[Toleration]:
    spec = template.get("spec")
    tolerations = spec.get("tolerations") if isinstance(spec, Mapping) else None
    return [Toleration.from_dict(t) for t in tolerations or ()]


def _allowed_tolerations(entries: Any) -> list[AllowedToleration] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        return []
    allowed = []
    for entry in entries:
        key, value, effect = (entry.get(f) if isinstance(entry, dict) else None for f in ("key", "value", "effect"))
        if isinstance(key, str) and key and all(f is None or isinstance(f, str) for f in (value, effect)):
            allowed.append(AllowedToleration(key, value, effect))
    return allowed
