"""The examples of manifests/examples as the local cluster's real nodes run them, and when each is done.

The examples are written for any cluster: no GPU product, no taint toleration, checkpoints on a
ReadWriteMany claim named `checkpoints`. The local cluster's real nodes (hack/real-nodes.sh)
differ from a cloud's in three ways, and `for_real_nodes` adds exactly those, nothing else:

- their GPUs are `Fake-GPU`s beside the KWOK nodes' simulated ones, which run nothing, so the
  workload asks for that product;
- they carry the taint `aisched.io/real-node` (ordinary pods stay off them), so the pod template
  tolerates it;
- they are all spot capacity, so a training job that would wait for on-demand capacity
  (spot policy Never, the default) may run on spot (Only). Prefer and Only stay as written; an
  InferenceService falls back to spot by itself when no on-demand node has room.

`checkpoint_storage` is the claim the examples mount: a hostPath volume both real nodes see (they
are one machine), bound to the claim in advance; in a cloud it is EFS, Filestore or Azure Files.
The e2e tier (tests/e2e/test_examples.py) and `make demo REAL_NODES=2` (hack/demo.sh) both use
this module, so the demo runs what the tests run.

    python -m aisched.testing.examples [--real-nodes] [--storage NAMESPACE HOST_PATH] DIRECTORY

prints the examples of DIRECTORY (its *.yaml, sorted), and with --storage the claim first, as
one YAML stream for `kubectl apply -f -`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

REAL_NODE_TAINT_KEY = "aisched.io/real-node"
REAL_NODE_GPU_PRODUCT = "Fake-GPU"
"""What hack/node-network.sh's REAL_NODE_GPU_PRODUCT labels the real nodes' GPUs."""
CHECKPOINT_CLAIM = "checkpoints"
WORKLOADS = ("TrainingJob", "InferenceService")

_TOLERATION = {"key": REAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def load_examples(directory: Path) -> list[dict[str, Any]]:
    """Every object of DIRECTORY's *.yaml files (not its subdirectories: those hold image sources).

    Queues first, then in file order: applied in this order, no workload meets the default queue
    the operator makes where none is written (which grants nothing).
    """
    found: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        found.extend(document for document in yaml.safe_load_all(path.read_text()) if document)
    return sorted(found, key=lambda document: document.get("kind") != "Queue")


def for_real_nodes(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of DOCUMENT that runs on the local cluster's real nodes (the module's docstring says why)."""
    result = copy.deepcopy(document)
    if result.get("kind") not in WORKLOADS:
        return result
    spec = result["spec"]
    spec["gpuType"] = REAL_NODE_GPU_PRODUCT
    pod = spec.setdefault("template", {}).setdefault("spec", {})
    tolerations = pod.setdefault("tolerations", [])
    if _TOLERATION not in tolerations:
        tolerations.append(dict(_TOLERATION))
    if result["kind"] == "TrainingJob":
        spot = spec.setdefault("spot", {})
        if spot.get("policy", "Never") == "Never":
            spot["policy"] = "Only"
    return result


def checkpoint_storage(namespace: str, host_path: str) -> list[dict[str, Any]]:
    """NAMESPACE's `checkpoints` claim, bound to a hostPath volume at HOST_PATH (a directory workers may write)."""
    volume = f"{namespace}-{CHECKPOINT_CLAIM}"
    size = {"storage": "1Gi"}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": size,
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": CHECKPOINT_CLAIM},
                "hostPath": {"path": host_path, "type": "Directory"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CHECKPOINT_CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": size},
            },
        },
    ]


def _key(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"


def failure(live: dict[str, Any]) -> str | None:
    """Why LIVE (an example as the API server holds it) can no longer reach its expected state; None while it can."""
    if live.get("kind") == "TrainingJob" and live.get("status", {}).get("phase") == "Failed":
        conditions = live["status"].get("conditions") or []
        said = "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}" for c in conditions)
        return f"{_key(live)} failed: {said}"
    return None


def reached(live: dict[str, Any]) -> bool:
    """Whether LIVE is where its example is meant to get: a training job Succeeded, every replica of a
    service Ready, a queue taken in by the operator (its status observes the spec's generation)."""
    status = live.get("status") or {}
    kind = live.get("kind")
    if kind == "TrainingJob":
        return bool(status.get("phase") == "Succeeded")
    if kind == "InferenceService":
        wanted = int(live["spec"].get("replicas", 1))
        return wanted > 0 and int(status.get("readyReplicas") or 0) >= wanted
    if kind == "Queue":
        return bool(status.get("observedGeneration") == live["metadata"].get("generation"))
    raise ValueError(f"{_key(live)}: no expected state for this kind; add one to aisched.testing.examples.reached")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the examples of a directory as one YAML stream.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--real-nodes", action="store_true", help="as the local cluster's real nodes run them")
    parser.add_argument("--storage", nargs=2, metavar=("NAMESPACE", "HOST_PATH"), help="the checkpoints claim first")
    args = parser.parse_args(argv)
    documents = load_examples(args.directory)
    if args.real_nodes:
        documents = [for_real_nodes(d) for d in documents]
    if args.storage:
        documents = [*checkpoint_storage(*args.storage), *documents]
    yaml.safe_dump_all(documents, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
