"""Which GPU each fractional worker or replica gets: the operator's decision, carried out by a DRA claim.

The cluster's GPUs are DRA devices (one per GPU, each with consumable `compute` in thousandths
and `memory`); shares already held are read back from the claims. A request goes to the GPU, of
the nodes it may use, where the fragmentation of that node for the demand the cluster has
now (the shares waiting and whole GPUs waiting, each weighted by the GPU share it asks:
aisched's weighting in policy/sharing/policies.py) grows least. The measure is FGD's
(policy/sharing/fragmentation.py) for one-GPU classes, taken per GPU so that memory and the
GPU product count too: a GPU without the memory a class needs is no use to that class.
Requests are placed largest first, so that a small one does not split the GPU a large one needed.

A GPU held whole (a device-plugin GPU or a whole-GPU claim) is no candidate. Pure: plain data in,
a decision out; ties go to the node and GPU that sort first, so that a decision is repeatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from aisched.policy.sharing.model import MILLI, TaskClass

DeviceId = tuple[str, str]
"""(node, device name) of one GPU."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as its DRA device publishes it."""

    node: str
    device: str
    product: str
    memory_mib: int

    @property
    def id(self) -> DeviceId:
        return (self.node, self.device)


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """Part of one GPU one worker or replica asks for: thousandths of compute and MiB of memory."""

    key: str
    milli: int
    memory_mib: int
    products: frozenset[str] = frozenset()
    """GPU products it accepts (empty: any)."""
    nodes: frozenset[str] = frozenset()
    """Nodes it may go to (empty: any), e.g. those its tolerations and the queue's spot policy allow."""

    def __post_init__(self) -> None:
        if not 0 < self.milli <= MILLI or self.memory_mib < 0:
            raise ValueError(f"share {self.key}: {self.milli} milli, {self.memory_mib} MiB")


@dataclass(frozen=True, slots=True)
class HeldShare:
    """What one allocated claim (or a pod holding a GPU whole) takes of one GPU."""

    device: DeviceId
    milli: int
    memory_mib: int


@dataclass(slots=True)
class GpuFree:
    milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class ShareAssignment:
    placed: dict[str, DeviceId] = field(default_factory=dict)
    unplaced: dict[str, str] = field(default_factory=dict)
    """Requests that fit on no GPU now, with why, for a person."""
    growth: float = 0.0
    """How much the placed requests grew the fragmentation of their nodes, in all (lower is better)."""


def free_capacity(gpus: Iterable[Gpu], held: Iterable[HeldShare]) -> dict[DeviceId, GpuFree]:
    """What is left of each GPU; a share on a device that is not published is ignored (its node went away)."""
    free = {gpu.id: GpuFree(MILLI, gpu.memory_mib) for gpu in gpus}
    for share in held:
        left = free.get(share.device)
        if left is not None:
            left.milli -= share.milli
            left.memory_mib -= share.memory_mib
    return free


def demand_classes(requests: Iterable[ShareRequest]) -> tuple[TaskClass, ...]:
    """The shapes of REQUESTS as task classes, each weighted by the GPU share its requests ask in all."""
    asked: dict[tuple[int, int, tuple[str, ...]], int] = {}
    for request in requests:
        shape = (request.milli, request.memory_mib, tuple(sorted(request.products)))
        asked[shape] = asked.get(shape, 0) + request.milli
    total = sum(asked.values()) or 1
    return tuple(
        TaskClass(0, 1, milli, frozenset(products), weight / total, memory)
        for (milli, memory, products), weight in sorted(asked.items())
    )


def assign_shares(
    gpus: Sequence[Gpu],
    held: Iterable[HeldShare],
    requests: Sequence[ShareRequest],
    waiting: Sequence[ShareRequest] = (),
    whole_gpus_waiting: int = 1,
) -> ShareAssignment:
    """A GPU for each of REQUESTS; WAITING is the rest of the demand the placement should leave room for.

    WHOLE_GPUS_WAITING is the whole-GPU demand (jobs waiting, in GPUs); at least one counts, as a
    cluster always has some: without it a fresh GPU would cost nothing to split, and shares spread.
    """
    free = free_capacity(gpus, held)
    by_node: dict[str, list[Gpu]] = {}
    for gpu in sorted(gpus, key=lambda g: g.id):
        by_node.setdefault(gpu.node, []).append(gpu)
    whole = [ShareRequest(f"whole-{i}", MILLI, 0) for i in range(max(whole_gpus_waiting, 1))]
    classes = demand_classes([*requests, *waiting, *whole])
    result = ShareAssignment()
    growth = 0.0
    for request in sorted(requests, key=lambda r: (-r.milli, -r.memory_mib, r.key)):
        best: tuple[float, DeviceId] | None = None
        for node, node_gpus in by_node.items():
            if request.nodes and node not in request.nodes:
                continue
            for gpu in node_gpus:
                left = free[gpu.id]
                if not _fits(request, gpu, left):
                    continue
                # The node's measure is a sum over its GPUs, so only this GPU's term changes.
                after = GpuFree(left.milli - request.milli, left.memory_mib)
                grown = _gpu_fragment(gpu, after, classes) - _gpu_fragment(gpu, left, classes)
                candidate = (grown, gpu.id)  # ties: the GPU that sorts first
                if best is None or candidate < best:
                    best = candidate
        if best is None:
            result.unplaced[request.key] = (
                f"no GPU has {request.milli / 10:g}% of its compute and {request.memory_mib} MiB of memory free"
                + (f" among {', '.join(sorted(request.products))}" if request.products else "")
            )
            continue
        chosen = best[1]
        free[chosen].milli -= request.milli
        free[chosen].memory_mib -= request.memory_mib
        result.placed[request.key] = chosen
        growth += best[0]
    return replace(result, growth=growth)


def _fits(request: ShareRequest, gpu: Gpu, left: GpuFree) -> bool:
    if request.products and gpu.product not in request.products:
        return False
    return left.milli >= request.milli and left.memory_mib >= request.memory_mib


def _fragmentation(node_gpus: Sequence[Gpu], free: Mapping[DeviceId, GpuFree], classes: Sequence[TaskClass]) -> float:
    """FGD's F_n for one-GPU classes (`class_fragmentation` in fragmentation.py), per GPU: the free
    compute a class cannot use is that of the GPUs with less than its share free, of a product it
    does not accept, or with less memory free than it needs. A sum of one term per GPU
    (`_gpu_fragment`): placing a share changes its GPU's term alone, which is what `assign_shares` weighs."""
    return sum(_gpu_fragment(gpu, free[gpu.id], classes) for gpu in node_gpus)


def _gpu_fragment(gpu: Gpu, left: GpuFree, classes: Sequence[TaskClass]) -> float:
    """One GPU's term of `_fragmentation`: its free compute, weighted by the classes that cannot use it."""
    if left.milli <= 0:
        return 0.0
    return sum(task.weight * left.milli for task in classes if not _usable(task, gpu, left))


def _usable(task: TaskClass, gpu: Gpu, left: GpuFree) -> bool:
    """Can a one-GPU TASK use what is LEFT of GPU? The one test of the measure and of `stranded_gpus`."""
    return (
        left.milli >= task.gpu_milli
        and left.memory_mib >= task.memory_mib
        and (not task.models or gpu.product in task.models)
    )


def stranded_gpus(
    gpus: Sequence[Gpu], held: Iterable[HeldShare], waiting: Sequence[ShareRequest], whole_gpus_waiting: int = 0
) -> dict[DeviceId, int]:
    """Partly used GPUs whose free part no class of the demand can use, with their free thousandths.

    The demand is WAITING's shapes and WHOLE_GPUS_WAITING whole GPUs, read as `assign_shares` reads
    them, and the test is `_fragmentation`'s, so a GPU counted here is one whose free part the packer
    counts as fragment for every class. With no demand at all nothing is stranded: nothing waits for it.
    """
    held = list(held)
    free = free_capacity(gpus, held)
    whole = [ShareRequest(f"whole-{i}", MILLI, 0) for i in range(whole_gpus_waiting)]
    classes = demand_classes([*waiting, *whole])
    if not classes:
        return {}
    stranded: dict[DeviceId, int] = {}
    for gpu in gpus:
        left = free[gpu.id]
        if 0 < left.milli < MILLI and not any(_usable(task, gpu, left) for task in classes):
            stranded[gpu.id] = left.milli
    return stranded
