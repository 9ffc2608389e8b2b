"""Which of its jobs a Queue refuses, worked out once per version of the job and of the queue.

The scheduling cycle asks about every job, every cycle: reading a Queue's tenancy and checking a
template against its pod policy (`policy.tenancy`, `policy.pod_policy`) costs tens of
microseconds, which over a backlog of 10,000 jobs would be most of a cycle. Both change only when
their object does, so a verdict stands until the job's object or its queue's is replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aisched.policy.tenancy import Refusal, Tenancy, template_tolerations, tenancy_from_wire

Key = tuple[str, str]  # namespace, name


@dataclass
class TenancyBook:
    """One per kind of job: the verdicts are kept by namespace and name."""

    _tenancies: dict[str, tuple[Mapping[str, Any] | None, Tenancy]] = field(default_factory=dict)
    _verdicts: dict[Key, tuple[object, Tenancy, Refusal | None]] = field(default_factory=dict)

    def tenancy(self, name: str, queue: Mapping[str, Any] | None) -> Tenancy:
        """What queue NAME lets in, as its object QUEUE says (None: no such queue, so the defaults)."""
        cached = self._tenancies.get(name)
        if cached is not None and cached[0] is queue:
            return cached[1]
        tenancy = tenancy_from_wire((queue or {}).get("spec"))
        self._tenancies[name] = (queue, tenancy)
        return tenancy

    def refusal(
        self,
        key: Key,
        version: object,
        *,
        queue_name: str,
        queue: Mapping[str, Any] | None,
        priority: int | None,
        template: Mapping[str, Any],
    ) -> Refusal | None:
        """Why QUEUE refuses the job KEY whose object is VERSION; None when it takes it.

        VERSION is compared by identity: the caller's object for the job, replaced on every change.
        """
        tenancy = self.tenancy(queue_name, queue)
        cached = self._verdicts.get(key)
        if cached is not None and cached[0] is version and cached[1] is tenancy:
            return cached[2]
        refused = tenancy.refusal(queue_name, key[0], priority, template_tolerations(template), template)
        self._verdicts[key] = (version, tenancy, refused)
        return refused

    def forget(self, key: Key) -> None:
        self._verdicts.pop(key, None)
