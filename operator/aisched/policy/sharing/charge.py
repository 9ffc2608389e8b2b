"""What one worker or replica is charged to its queue, in GPU-equivalents (thousandths of a GPU).

The same numbers the pods then hold (`aisched.kube.claims` writes a fraction's thousandths on its
pod; a MIG instance is its compute slices over 7, rounded up), so that what a queue is charged
for a gang is never less than what its pods hold: charged == held for whole GPUs, compute
fractions and MIG instances; a fraction that asks memory is charged by the smallest GPU it could
land on (GPU_MEMORY_MIB), or whole when that is unknown, never less than it takes.
"""

from __future__ import annotations

from aisched.api.sharing import GpuShare, mig_milli

MILLI = 1000


def share_milli(share: GpuShare, gpu_memory_mib: int) -> int:
    """GPU-equivalents (thousandths) a fraction takes of a GPU with GPU_MEMORY_MIB: the larger of its compute
    and memory shares, rounded up, so that what is charged is what no one else can use. A memory ask on a
    GPU of unknown memory (0) takes the whole GPU."""
    return fraction_milli((share.compute_percent or 0) * 10, share.memory_mib, gpu_memory_mib)


def fraction_milli(compute_milli: int, memory_mib: int | None, gpu_memory_mib: int) -> int:
    """`share_milli` of a fraction asking COMPUTE_MILLI thousandths and MEMORY_MIB (None: no memory ask)."""
    if memory_mib and gpu_memory_mib <= 0:
        return MILLI
    memory = -(-(memory_mib or 0) * MILLI // max(gpu_memory_mib, 1))
    return min(max(compute_milli, memory, 1), MILLI)


def replica_milli(share: GpuShare | None, gpus_per_replica: int, gpu_memory_mib: int = 0) -> int:
    """What one worker or replica holds: GPUS_PER_REPLICA whole GPUs, or its SHARE of one."""
    if share is None:
        return gpus_per_replica * MILLI
    if share.mig_profile is not None:
        return mig_milli(share.mig_profile)
    return share_milli(share, gpu_memory_mib)
