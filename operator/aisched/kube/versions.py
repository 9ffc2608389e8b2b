"""Which of two copies of an object is newer, for caches fed by both a watch and relists.

A relist reads the cluster as of one resourceVersion while watch events keep
arriving; applied blindly it would put back a pod the watch saw change or go
after the list was read. Kubernetes calls resourceVersions opaque, but every
etcd-backed API server gives etcd's revision: an integer that only grows. We
compare them as integers when both are; when either is not, nothing is known
and the caller takes the copy it was handed last, as before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


def is_newer(version: str | None, than: str | None) -> bool:
    """VERSION is known to be newer than THAN: both integers, and larger."""
    try:
        return int(version or "") > int(than or "")
    except ValueError:
        return False


@dataclass
class VersionLedger(Generic[K]):
    """The resourceVersion each object was last seen at, and of those deleted since the last relist."""

    seen: dict[K, str] = field(default_factory=dict)
    tombstones: dict[K, str] = field(default_factory=dict)
    """Keys deleted at a version the last relist had not read yet: an older listed copy must not bring them back."""

    def is_stale(self, key: K, version: str | None) -> bool:
        """A copy at VERSION is older than the one we hold, or than the object's deletion."""
        known = self.seen.get(key)
        if known is None:
            known = self.tombstones.get(key)
        return known is not None and is_newer(known, version)

    def saw(self, key: K, version: str | None) -> None:
        self.seen[key] = version or ""
        self.tombstones.pop(key, None)

    def deleted(self, key: K, version: str | None) -> None:
        self.seen.pop(key, None)
        if version:
            self.tombstones[key] = version

    def begin_relist(self, list_version: str) -> None:
        """Deletions the list already reflects need no tombstone any more."""
        self.tombstones = {k: v for k, v in self.tombstones.items() if is_newer(v, list_version)}

    def absent(self, listed: Iterable[K], list_version: str) -> list[K]:
        """Keys a list at LIST_VERSION left out that were last seen no later than it: they are gone.

        One seen at a newer version came (or changed) after the list was read and stays.
        """
        present = set(listed)
        return [k for k, v in self.seen.items() if k not in present and not is_newer(v, list_version)]
