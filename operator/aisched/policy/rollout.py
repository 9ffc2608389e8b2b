"""How far a template change may roll out now: surge and unavailability bounds. Pure.

The arithmetic is the Deployment controller's, so people who know
``maxSurge``/``maxUnavailable`` can predict it (both are absolute counts here):

- Replicas of the current template may grow to ``desired``, as long as all
  replicas, old and new, stay within ``desired + maxSurge``.
- Replicas of earlier templates may go as long as the ready ones left stay at
  or above ``desired - maxUnavailable`` (the available minimum). New replicas
  that are not ready yet do not count; old ones that are not ready go first,
  since they carry no traffic.

Replicas being torn down are left out by the caller: they neither serve nor
count against the surge. Which new replica goes where is
:func:`aisched.policy.serving.plan_serving`'s business; this only says how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aisched.policy.serving import ServingReplica


@dataclass(frozen=True)
class RolloutStep:
    current_target: int
    """How many replicas of the current template to have now."""
    retire_old: tuple[str, ...]
    """Replicas of earlier templates to retire now."""

    @property
    def done(self) -> bool:
        return not self.retire_old


def plan_rollout(
    current: Sequence[ServingReplica],
    old: Sequence[ServingReplica],
    desired: int,
    max_surge: int,
    max_unavailable: int,
) -> RolloutStep:
    """The next step towards ``desired`` replicas of the current template and none of the others."""
    if not old:
        return RolloutStep(current_target=desired, retire_old=())
    total = len(current) + len(old)
    room = max(desired + max_surge - total, 0)
    current_target = min(desired, len(current) + room)
    min_available = max(desired - max_unavailable, 0)
    current_unready = sum(not r.ready for r in current)
    # What may go without taking ready replicas below the minimum; unready new ones
    # would count as available here, so they are taken off (as the Deployment controller does).
    budget = max(total - min_available - current_unready, 0)
    # Unready old replicas first: they carry no traffic, and the budget counts them as
    # replicas beyond the minimum, so what is left of it is exactly the ready ones to spare.
    order = sorted(old, key=lambda r: (r.ready, r.name))
    return RolloutStep(current_target=current_target, retire_old=tuple(r.name for r in order[:budget]))
