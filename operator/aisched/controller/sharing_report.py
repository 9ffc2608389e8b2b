"""What the shared GPUs look like, for the metrics: parts allocated and GPUs stranded, per pool.

Read off the same record the controllers hand shares from (`GpuShares`: the inventory's pods and the
shares handed out that the watch has not shown yet), and judged stranded by the packer's own test
(`policy.sharing.assign.stranded_gpus`) against the demand waiting now, so that a stranded GPU on
the dashboard is one the packer counts as fragment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aisched.api.sharing import GpuShare
from aisched.controller.sharing import GpuShares
from aisched.kube.claims import share_memory_mib
from aisched.kube.inventory import Inventory
from aisched.metrics import MigSlices, SharedGpuUsage
from aisched.metrics.sharing import mig_slices
from aisched.policy.sharing.assign import ShareRequest, stranded_gpus
from aisched.policy.sharing.charge import share_milli


def waiting_shares(asks: Iterable[tuple[str, GpuShare, int, str | None]], gpu_memory_mib: int) -> list[ShareRequest]:
    """One ShareRequest per replica of each (key, share, replicas, gpu type) waiting; MIG asks are no fraction."""
    requests = []
    for key, share, replicas, gpu_type in asks:
        if share.mig_profile is not None:
            continue
        milli = share_milli(share, gpu_memory_mib)
        memory = share_memory_mib(share, milli, gpu_memory_mib)
        products = frozenset({gpu_type}) if gpu_type else frozenset()
        requests += [ShareRequest(f"{key}/{i}", milli, memory, products) for i in range(replicas)]
    return requests


def shared_gpu_usage(
    shares: GpuShares, waiting: Sequence[ShareRequest], whole_gpus_waiting: int
) -> list[SharedGpuUsage]:
    """Per (GPU type, capacity type): GPUs shares hold parts of, what they hold, and GPUs stranded.

    The demand is WAITING (TrainingJob workers) and the InferenceService replicas that fit nowhere now
    (`GpuShares.replicas_waiting`): a GPU only those could use is not stranded."""
    inventory = shares.inventory
    serving = ((f"{ns}/{name}", *ask) for (ns, name), ask in sorted(shares.replicas_waiting.items()))
    waiting = [*waiting, *waiting_shares(serving, inventory.smallest_gpu_memory_mib())]
    pools: dict[tuple[str, str], list[int]] = {}
    assumed_nodes = {node for node, _ in shares.assumed.values()}
    for name in sorted(set(inventory.shared_nodes()) | assumed_nodes):
        node = inventory.nodes.get(name)
        if node is None:
            continue
        gpus = shares.gpus(name)
        held = shares.held(name, gpus)
        parts: dict[str, int] = {}
        for pod in inventory.pods_on_node(name):
            if pod.share is not None and pod.holds_gpus:
                parts[pod.share.device] = parts.get(pod.share.device, 0) + pod.share.milli
        for held_node, share in shares.assumed.values():
            if held_node == name:
                parts[share.device] = parts.get(share.device, 0) + share.milli
        stranded = stranded_gpus(gpus, held, waiting, whole_gpus_waiting)
        totals = pools.setdefault((node.gpu_product or "unknown", str(node.capacity_type)), [0, 0, 0, 0])
        for index, value in enumerate((len(parts), sum(parts.values()), len(stranded), sum(stranded.values()))):
            totals[index] += value
    return [SharedGpuUsage(product, capacity, *totals) for (product, capacity), totals in sorted(pools.items())]


def mig_instances(inventory: Inventory) -> list[MigSlices]:
    """MIG instances by (GPU type, profile): what each node's device plugin offers and what pods hold."""
    offered = []
    for name, mig in inventory.mig_nodes().items():
        node = inventory.nodes.get(name)
        product = (node.gpu_product if node else None) or "unknown"
        offered += [(product, profile, count) for profile, count in mig.allocatable]
    held = []
    for pod in inventory.pods.values():
        if not pod.mig_profiles or not pod.holds_gpus:
            continue
        node = inventory.nodes.get(pod.gpu_node) if pod.gpu_node else None
        product = (node.gpu_product if node else None) or "unknown"
        held += [(product, profile) for profile in pod.mig_profiles]
    return mig_slices(offered, held)
