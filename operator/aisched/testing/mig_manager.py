"""A stand-in for NVIDIA's MIG manager on the KWOK nodes: it applies `nvidia.com/mig.config` as the real one reports it.

The real MIG manager (GPU Operator) watches its node's `nvidia.com/mig.config` label, sets
`nvidia.com/mig.config.state=pending`, stops the GPU clients, applies the named mig-parted config,
restarts the device plugin (whose "mixed" strategy then advertises one `nvidia.com/mig-<profile>`
per instance and `nvidia.com/gpu` only for GPUs with MIG off) and sets the state to `success`, or
`failed`. This one does the same to KWOK nodes after DELAY seconds: it rewrites the node's
allocatable and capacity and GPU Feature Discovery's `nvidia.com/mig-<profile>.count` labels.
How long a real reconfiguration takes depends on the driver and on whether the node reboots
(`WITH_REBOOT`, needed on some clouds): NVIDIA publishes no figure; the GPU Operator's MIG guide
shows the state going from `pending` to `success` after the device plugin and GPU Feature
Discovery pods restart, which is tens of seconds to minutes, and a reboot adds the node's boot
time. The default delay (60 s) is that order; tests pass seconds.

Like the real one, it refuses to repartition under a running pod: a node where a pod holds a
GPU (whole or MIG) when the delay ends gets `failed` and keeps its instances.

Usage: python -m aisched.testing.mig_manager --kubeconfig PATH [--delay-seconds 60]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any, Final

from kubernetes import client, config

from aisched.api.sharing import GPU_MODELS
from aisched.policy.sharing.mig_configs import CONFIG_LABEL, STATE_FAILED, STATE_LABEL, STATE_SUCCESS, instances

log = logging.getLogger("aisched.testing.mig_manager")

GPU: Final = "nvidia.com/gpu"
MIG_PREFIX: Final = "nvidia.com/mig-"
STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
PENDING: Final = "pending"


def node_resources(
    node: dict[str, Any], config_name: str
) -> tuple[dict[str, str | None], dict[str, str | None]] | None:
    """(allocatable patch, labels patch) that make NODE advertise CONFIG_NAME's instances; None for a config
    or a node the stand-in cannot apply (no MIG-capable product, an unknown name)."""
    labels = node["metadata"].get("labels") or {}
    model = GPU_MODELS.get(labels.get("nvidia.com/gpu.product", ""))
    count = labels.get("nvidia.com/gpu.count", "0")
    gpus = int(count) if count.isdigit() else 0
    if model is None or gpus <= 0:
        return None
    counts = instances(model, config_name, gpus)
    if not counts and config_name != "all-disabled":
        return None
    allocatable: dict[str, str | None] = {
        r: None for r in (node.get("status", {}).get("allocatable") or {}) if r.startswith(MIG_PREFIX)
    }
    allocatable.update({MIG_PREFIX + profile: str(n) for profile, n in counts.items()})
    allocatable[GPU] = "0" if counts else str(gpus)
    new_labels: dict[str, str | None] = {k: None for k in labels if k.startswith(MIG_PREFIX) and k.endswith(".count")}
    new_labels.update({f"{MIG_PREFIX}{profile}.count": str(n) for profile, n in counts.items()})
    new_labels[STRATEGY_LABEL] = "mixed"
    return allocatable, new_labels


def _holds_gpu(pod: Any) -> bool:
    if pod.status.phase in ("Succeeded", "Failed"):
        return False
    for container in pod.spec.containers or ():
        limits = (container.resources.limits if container.resources else None) or {}
        if any(r == GPU or r.startswith(MIG_PREFIX) for r in limits):
            return True
    return False


class MigManagerStandIn:
    def __init__(self, api: client.ApiClient, delay_seconds: float) -> None:
        self.core = client.CoreV1Api(api)
        self.delay_seconds = delay_seconds
        self.due: dict[str, tuple[str, float]] = {}  # node -> (config, when it is applied)

    def pass_once(self, now: float) -> None:
        for node in self.core.list_node(label_selector=CONFIG_LABEL).items:
            name, labels = node.metadata.name, node.metadata.labels or {}
            wanted, state = labels[CONFIG_LABEL], labels.get(STATE_LABEL)
            if state != PENDING and name not in self.due and labels.get(_APPLIED) == wanted:
                continue
            if self.due.get(name, ("", 0.0))[0] != wanted:
                self.due[name] = (wanted, now + self.delay_seconds)
                self.core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: PENDING}}})
                log.info("%s: applying %s in %.0f s", name, wanted, self.delay_seconds)
            elif now >= self.due[name][1]:
                self._apply(name, wanted)
                del self.due[name]

    def _apply(self, name: str, wanted: str) -> None:
        node = self.core.api_client.sanitize_for_serialization(self.core.read_node(name))
        held = [p for p in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items]
        patches = node_resources(node, wanted)
        if patches is None or any(_holds_gpu(p) for p in held):
            why = "a pod holds a GPU" if patches is not None else "no such config for the node"
            log.warning("%s: %s not applied: %s", name, wanted, why)
            self.core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: STATE_FAILED, _APPLIED: wanted}}})
            return
        allocatable, labels = patches
        self.core.patch_node_status(name, {"status": {"allocatable": allocatable, "capacity": allocatable}})
        self.core.patch_node(name, {"metadata": {"labels": {**labels, STATE_LABEL: STATE_SUCCESS, _APPLIED: wanted}}})
        log.info("%s: %s applied", name, wanted)

    def run(self, interval_seconds: float = 0.5) -> None:
        while True:
            try:
                self.pass_once(time.monotonic())
            except client.ApiException as error:
                log.warning("pass failed (%s); trying again", error.reason)
            time.sleep(interval_seconds)


# The config this stand-in last finished (success or failed), so that a label it has seen is not applied again
# (the real MIG manager keeps this in its own process).
_APPLIED: Final = "aisched.io/mig-manager-applied"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Apply nvidia.com/mig.config to KWOK nodes as NVIDIA's MIG manager.")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--delay-seconds", type=float, default=60.0, help="how long a reconfiguration takes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    api = config.new_client_from_config(config_file=str(args.kubeconfig))
    MigManagerStandIn(api, args.delay_seconds).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
