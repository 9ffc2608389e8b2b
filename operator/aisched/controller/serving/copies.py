"""Our copy of an InferenceService object, kept ahead of the watch by our own writes.

A scale write and a status write show in our copy at once; a watch event from before them,
still on its way, is older (a lower generation or resourceVersion) and must not undo them.
"""

from __future__ import annotations

from typing import Any

from aisched.kube.versions import is_newer


def is_older(incoming: dict[str, Any], cached: dict[str, Any] | None) -> bool:
    """INCOMING is the same object as CACHED at an older generation or resourceVersion: a watch
    event from before our own scale or status write."""
    if cached is None or incoming["metadata"].get("uid") != cached["metadata"].get("uid"):
        return False
    if is_newer(cached["metadata"].get("resourceVersion"), incoming["metadata"].get("resourceVersion")):
        return True
    return int(incoming["metadata"].get("generation") or 0) < int(cached["metadata"].get("generation") or 0)


def scaled(obj: dict[str, Any], replicas: int) -> dict[str, Any]:
    """OBJ as our scale write to REPLICAS leaves it: a spec change, so the next generation."""
    metadata = {**obj["metadata"], "generation": int(obj["metadata"].get("generation") or 0) + 1}
    return {**obj, "metadata": metadata, "spec": {**obj["spec"], "replicas": replicas}}


def written(obj: dict[str, Any], status: dict[str, Any], version: str) -> dict[str, Any]:
    """OBJ as our status write of STATUS (wire form) leaves it, at VERSION."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}, "status": status}
