"""Parts of GPUs for the pods of a TrainingJob or an InferenceService with `gpuShare`: which GPU, and the claim.

The scheduler (gangs) and the serving planner (replicas) choose each pod's node where a GPU has room
for its share (`policy.share_placement`, which plans the GPU by the same measure); this part chooses
the GPU on that node (`policy.sharing.assign`, against the shares the
inventory's pods hold and those it handed out that the watch has not shown yet, as kube-scheduler
"assumes" a binding) and turns each pod into one that holds its share: through a DRA claim made
from a ResourceClaimTemplate of its own (`kube.claims`), or a MIG instance of the device plugin.
Controllers call `shared_pods` between building their pods and creating them, and create the
templates first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.api.sharing import GpuShare
from aisched.controller.mig import MigInstanceUnavailableError, MigPartitions
from aisched.kube.claims import (
    PodShare,
    build_share_claim_template,
    device_index,
    share_memory_mib,
    with_share_claim,
)
from aisched.kube.inventory import Inventory
from aisched.kube.records import PodKey
from aisched.policy.sharing.assign import Gpu, HeldShare, ShareRequest, assign_shares
from aisched.policy.sharing.charge import share_milli

MILLI = 1000


class ShareDoesNotFitError(Exception):
    """No GPU of a pod's node has its share free now: the controller tries again on its next pass."""


@dataclass
class GpuShares:
    inventory: Inventory
    assumed: dict[PodKey, tuple[str, PodShare]] = field(default_factory=dict)
    """Shares handed to pods the inventory has not seen yet, by pod: (node, share)."""
    mig: MigPartitions = field(init=False)
    """The MIG instances handed out and the repartitions under way."""
    replicas_waiting: dict[tuple[str, str], tuple[GpuShare, int, str | None]] = field(default_factory=dict)
    """InferenceService replicas with a share that fit on no GPU now, by service: (share, replicas, GPU type),
    for the stranded-GPU measure (`sharing_report`), which the TrainingJob side reports."""

    def __post_init__(self) -> None:
        self.mig = MigPartitions(self.inventory)

    def note_waiting_replicas(
        self, key: tuple[str, str], share: GpuShare | None, count: int, gpu_type: str | None, queue: str = ""
    ) -> None:
        """COUNT replicas of service KEY, each asking SHARE, fit nowhere now (0, or no share: none waits); a
        MIG repartition for them is bounded by QUEUE's quota ("": by what they fill only)."""
        if share is None or count <= 0:
            self.replicas_waiting.pop(key, None)
            return
        self.replicas_waiting[key] = (share, count, gpu_type)
        if share.mig_profile is not None:
            self.mig.asked({share.mig_profile: count}, queue)

    def forget(self, pods: Sequence[dict[str, Any]]) -> None:
        """PODS were not created after all: what they were handed is free again."""
        self.mig.forget(pods)
        for pod in pods:
            self.assumed.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)

    def gpus(self, node: str) -> list[Gpu]:
        """NODE's GPUs as its DRA driver publishes them: `gpu-<index>` for each allocatable GPU."""
        record = self.inventory.nodes.get(node)
        if record is None:
            return []
        memory = self.inventory.gpu_memory_mib(node)
        return [Gpu(node, f"gpu-{i}", record.gpu_product or "", memory) for i in range(record.allocatable_gpus)]

    def held(self, node: str, gpus: Sequence[Gpu]) -> list[HeldShare]:
        """What NODE's pods hold of its GPUs: their shares, the GPUs other claims are allocated, and whole GPUs of
        the device plugin, which it does not name: they count as the highest GPUs no claim holds, as none may
        share them."""
        for key in [k for k in self.assumed if k in self.inventory.pods]:
            del self.assumed[key]  # the watch has shown it: the inventory counts it now
        shares = [(p.share, p) for p in self.inventory.pods_on_node(node) if p.share is not None and p.holds_gpus]
        held = [HeldShare((node, share.device), share.milli, share.memory_mib) for share, _ in shares]
        held += [HeldShare((node, s.device), s.milli, s.memory_mib) for n, s in self.assumed.values() if n == node]
        shared = {h.device for h in held}
        # GPUs other claims hold are known by name (their allocation); the device plugin's are not.
        memory = {gpu.id: gpu.memory_mib for gpu in gpus}
        claimed = {
            (node, d.device) for p in self.inventory.pods_on_node(node) if p.holds_gpus for d in p.claimed
        } - shared
        held += [HeldShare(device, MILLI, memory.get(device, 0)) for device in sorted(claimed)]
        shared |= claimed
        whole = sum(p.gpus for p in self.inventory.pods_on_node(node) if p.holds_gpus)
        for gpu in sorted(gpus, key=lambda g: -device_index(g.device)):
            if whole <= 0:
                break
            if gpu.id not in shared:
                held.append(HeldShare(gpu.id, MILLI, gpu.memory_mib))
                whole -= 1
        return held

    def assign(self, share: GpuShare, pods: Sequence[dict[str, Any]]) -> list[PodShare]:
        """A fraction's GPU for each of PODS (built, pinned to their nodes), together, so that pods of one node
        may share one GPU; ShareDoesNotFitError when one fits on no GPU of its node."""
        nodes = sorted({_node_of(pod) for pod in pods})
        gpus = [gpu for node in nodes for gpu in self.gpus(node)]
        held = [h for node in nodes for h in self.held(node, [g for g in gpus if g.node == node])]
        memory = {node: self.inventory.gpu_memory_mib(node) for node in nodes}
        requests = []
        for pod in pods:
            node = _node_of(pod)
            milli = share_milli(share, memory[node])
            needs = share_memory_mib(share, milli, memory[node])
            requests.append(ShareRequest(_name_of(pod), milli, needs, nodes=frozenset({node})))
        result = assign_shares(gpus, held, requests)
        if result.unplaced:
            name, why = next(iter(sorted(result.unplaced.items())))
            raise ShareDoesNotFitError(f"pod {name}: {why} on its node")
        by_name = {r.key: r for r in requests}
        return [PodShare(result.placed[r.key][1], r.milli, r.memory_mib) for r in (by_name[_name_of(p)] for p in pods)]

    def shared_pods(
        self,
        share: GpuShare | None,
        pods: Sequence[dict[str, Any]],
        owner: dict[str, Any],
        gpu_type: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(claim templates to create first, PODS as they hold SHARE); PODS unchanged without one.

        The pods must ask for no `nvidia.com/gpu`: the controllers build them so for a share."""
        if share is None:
            return [], list(pods)
        if share.mig_profile is not None:
            try:
                return [], self.mig.place(share.mig_profile, pods, gpu_type)
            except MigInstanceUnavailableError as none_free:
                raise ShareDoesNotFitError(str(none_free)) from None
        pod_shares = self.assign(share, pods)
        templates, shared = [], []
        for pod, pod_share in zip(pods, pod_shares, strict=True):
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            templates.append(build_share_claim_template(namespace, name, pod_share, owner, pod["metadata"]["labels"]))
            shared.append(with_share_claim(pod, name, pod_share))
            self.assumed[(namespace, name)] = (_node_of(pod), pod_share)
        return templates, shared


def _node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["nodeSelector"]["kubernetes.io/hostname"])


def _name_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])
