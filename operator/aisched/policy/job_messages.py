"""What a TrainingJob's status and Events tell its user about where it runs and when it starts.

Pure text from plain data, so the simulator and tests read the same words the
operator writes, and a change of wording is a change in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from aisched.policy.carbon import CarbonPlan
from aisched.policy.placement import Placement


def admitted_message(placement: Placement, preempting: Sequence[str] = ()) -> str:
    """Where the scheduler put the gang, and whom it preempted to make room."""
    message = f"placed in {placement.to_status().domain or 'the cluster'}"
    if preempting:
        message += f" after preempting {', '.join(preempting)}"
    return message


def gang_nodes_message(replicas: int, gpus_per_replica: int, nodes: Sequence[str]) -> str:
    """The Admitted condition's message: the gang's shape and the nodes it holds, by rank."""
    return f"{replicas} x {gpus_per_replica} GPUs on {', '.join(nodes)}"


def deferred_message(plan: CarbonPlan) -> str:
    """The Event of a job whose start the carbon plan puts off."""
    return f"start deferred to {plan.start:%Y-%m-%d %H:%M} UTC: {plan.message}"
