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

    _tenancies: dict[str, tuple[object, Tenancy]] = field(default_factory=dict)
    _verdicts: dict[Key, tuple[int | None, Mapping[str, Any], Tenancy, Refusal | None]] = field(default_factory=dict)

    def tenancy(self, name: str, queue: Mapping[str, Any] | None) -> Tenancy:
        """What queue NAME lets in, as its object QUEUE says (None: no such queue, so the defaults).

        Read again when its spec is another object; the same Tenancy is kept while what it says is
        the same, so a status write or a resync of the queue keeps every job's verdict.
        """
        spec = (queue or {}).get("spec")
        cached = self._tenancies.get(name)
        if cached is not None and cached[0] is spec:
            return cached[1]
        tenancy = tenancy_from_wire(spec)
        if cached is not None and cached[1] == tenancy:
            tenancy = cached[1]
        self._tenancies[name] = (spec, tenancy)
        return tenancy

    def refusal(
        self,
        key: Key,
        *,
        queue_name: str,
        queue: Mapping[str, Any] | None,
        priority: int | None,
        template: Mapping[str, Any],
    ) -> Refusal | None:
        """Why QUEUE refuses the job KEY, asking for PRIORITY with pods made from TEMPLATE; None when
        it takes it. A template equal to the last one asked about gets the same answer, cheaply."""
        tenancy = self.tenancy(queue_name, queue)
        cached = self._verdicts.get(key)
        if cached is not None and cached[2] is tenancy and cached[0] == priority and cached[1] == template:
            refused = cached[3]
        else:
            refused = tenancy.refusal(queue_name, key[0], priority, template_tolerations(template), template)
        # The template held is the caller's latest, so an older copy of it is not kept alive here.
        self._verdicts[key] = (priority, template, tenancy, refused)
        return refused

    def forget(self, key: Key) -> None:
        self._verdicts.pop(key, None)
