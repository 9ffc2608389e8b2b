"""A job's pods run at the operator's priority, never at one their template names.

Which tenant goes first is the queues' decision: `spec.priority` orders jobs within the cap
their queue grants. A PriorityClass in the template would instead let kube-scheduler preempt
other teams' pods for it, and some (system-node-critical, system-cluster-critical) may be used
in any namespace. So a template may set none of the pod's priority fields; the operator gives
every worker the class it is configured with (settings.worker_priority_class_name).
"""

from __future__ import annotations

from typing import Any

from aisched.api.common import cel

PRIORITY_FIELDS = ("priorityClassName", "priority", "preemptionPolicy")


def priority_message(field: str) -> str:
    return (
        f"template.spec.{field} is not allowed: the operator sets its pods' priority; "
        "order jobs with spec.priority, within the cap of their queue"
    )


# The rules of every spec with a pod template (TrainingJob, InferenceService); the fields are
# typed in POD_TEMPLATE_SCHEMA so that CEL sees them.
PRIORITY_RULES = [cel(f"!has(self.template.spec.{field})", priority_message(field)) for field in PRIORITY_FIELDS]


def check_priority_rules(template: dict[str, Any]) -> None:
    """The same rules as PRIORITY_RULES, with their messages, for the models."""
    spec = template.get("spec", {})
    for field in PRIORITY_FIELDS:
        if field in spec:
            raise ValueError(priority_message(field))
