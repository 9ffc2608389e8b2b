"""What placement knows of GPUs handed out in parts: the free part of each GPU that shares hold, and MIG instances.

A `ClusterSnapshot` counts a GPU that any share holds as one GPU in use, so that whole-GPU
placement never counts on it. A share may still fit what is left of it: `SharedRoom` keeps,
per node, the free thousandths and MiB of each GPU shares hold (by the device name its DRA
driver publishes, `gpu-<index>`, as `controller/sharing.py` names them), each node's GPU memory,
and the nodes whose GPUs are MIG-partitioned with their free `nvidia.com/mig-<profile>` instances
(such a node advertises no whole GPU, so the snapshot's nodes leave it out). Changes made inside
a snapshot's trial are undone with it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aisched.api.sharing import GpuShare
from aisched.policy.nodes import Node
from aisched.policy.sharing.charge import fraction_milli

MILLI = 1000


@dataclass(frozen=True, slots=True)
class ShareShape:
    """The part of one GPU each worker or replica asks (`gpuShare`): a fraction, or one MIG instance."""

    compute_milli: int = 0
    memory_mib: int | None = None
    mig_profile: str | None = None

    @classmethod
    def of(cls, share: GpuShare | None) -> ShareShape | None:
        if share is None:
            return None
        if share.mig_profile is not None:
            return cls(mig_profile=share.mig_profile)
        return cls((share.compute_percent or 0) * 10, share.memory_mib)

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None

    def milli_on(self, gpu_memory_mib: int) -> int:
        """Thousandths it takes of a GPU with GPU_MEMORY_MIB (`policy.sharing.charge.share_milli`)."""
        return fraction_milli(self.compute_milli, self.memory_mib, gpu_memory_mib)

    def memory_on(self, milli: int, gpu_memory_mib: int) -> int:
        """MiB it reserves there (`kube.claims.share_memory_mib`): its ask, else its compute's share of the memory."""
        return self.memory_mib if self.memory_mib is not None else milli * gpu_memory_mib // MILLI

    def fit(self, free_milli: int, free_memory_mib: int, gpu_memory_mib: int) -> int:
        """How many of it fit in FREE_MILLI and FREE_MEMORY_MIB of one GPU with GPU_MEMORY_MIB."""
        milli = self.milli_on(gpu_memory_mib)
        memory = self.memory_on(milli, gpu_memory_mib)
        count = free_milli // milli
        return min(count, free_memory_mib // memory) if memory > 0 else count


@dataclass(frozen=True, slots=True)
class SharePart:
    """One replica's part of one GPU, as placement planned it."""

    node: str
    device: str
    milli: int
    memory_mib: int
    splits: bool
    """The GPU was wholly free before: it counts as one more GPU in use on its node."""


class SharedRoom:
    """Free parts of shared GPUs and free MIG instances, as of a snapshot; changed by what a cycle places."""

    def __init__(
        self,
        parts: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
        gpu_memory: Mapping[str, int] | None = None,
        mig_nodes: Iterable[Node] = (),
        mig_free: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.parts: dict[str, dict[str, tuple[int, int]]] = {n: dict(d) for n, d in (parts or {}).items()}
        """Per node, per device some share holds: (free thousandths, free MiB)."""
        self.gpu_memory: Mapping[str, int] = gpu_memory or {}
        """MiB of each node's GPUs (0: unknown); read only."""
        self.mig_nodes: dict[str, Node] = {node.name: node for node in mig_nodes}
        self.mig_free: dict[str, dict[str, int]] = {n: dict(f) for n, f in (mig_free or {}).items()}
        """Per MIG node that may take pods now: free instances by profile."""
        self._journal: list[tuple[str, str, str, int, int]] = []
        self.trials = 0

    def copy(self) -> SharedRoom:
        return SharedRoom(self.parts, self.gpu_memory, self.mig_nodes.values(), self.mig_free)

    def __bool__(self) -> bool:
        return bool(self.parts or self.mig_free)

    def memory_of(self, node: str) -> int:
        return self.gpu_memory.get(node, 0)

    def take_part(self, part: SharePart) -> None:
        """PART of its GPU is held from now on (a GPU no share held before starts at all of it free)."""
        milli, memory = self.parts.get(part.node, {}).get(part.device, (MILLI, self.memory_of(part.node)))
        self._set_part(part.node, part.device, milli - part.milli, memory - part.memory_mib)

    def give_part(self, part: SharePart) -> bool:
        """PART of its GPU is free again (a gang stops or shrinks, in a trial or for real); True when no
        share holds any of the GPU then, so that it counts as a whole free GPU again."""
        held = self.parts.get(part.node, {}).get(part.device)
        if held is None:
            return False  # no share holds that GPU as far as the snapshot knows: nothing to give back
        milli, memory = held[0] + part.milli, held[1] + part.memory_mib
        if milli < MILLI:
            self._set_part(part.node, part.device, milli, memory)
            return False
        self._journal_if_trial(("part", part.node, part.device, *held))
        del self.parts[part.node][part.device]
        if not self.parts[part.node]:
            del self.parts[part.node]
        return True

    def give_mig(self, node: str, profile: str, count: int = 1) -> None:
        """COUNT instances of PROFILE on NODE are free again; a node that takes no pods now gains none."""
        free = self.mig_free.get(node)
        if free is None:
            return
        self._journal_if_trial(("mig", node, profile, free.get(profile, 0), 0))
        free[profile] = free.get(profile, 0) + count

    def take_mig(self, node: str, profile: str, count: int = 1) -> None:
        free = self.mig_free.setdefault(node, {})
        self._journal_if_trial(("mig", node, profile, free.get(profile, 0), 0))
        free[profile] = free.get(profile, 0) - count

    def mark(self) -> int:
        return len(self._journal)

    def undo_to(self, mark: int) -> None:
        """Put back what changed since MARK (a trial's start)."""
        while len(self._journal) > mark:
            kind, node, key, first, second = self._journal.pop()
            if kind == "mig":
                self.mig_free[node][key] = first
            elif first < 0:  # the device held no share before
                del self.parts[node][key]
                if not self.parts[node]:
                    del self.parts[node]
            else:  # changed, or given back whole (its node's entry may have gone with it)
                self.parts.setdefault(node, {})[key] = (first, second)

    def _set_part(self, node: str, device: str, milli: int, memory: int) -> None:
        before = self.parts.get(node, {}).get(device)
        self._journal_if_trial(("part", node, device, *(before if before is not None else (-1, -1))))
        self.parts.setdefault(node, {})[device] = (milli, memory)

    def _journal_if_trial(self, entry: tuple[str, str, str, int, int]) -> None:
        if self.trials:
            self._journal.append(entry)
