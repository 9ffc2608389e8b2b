"""The versions hack/versions.env pins (Kubernetes, Kueue, the job frameworks' controllers), as written.

Apart from `aisched.testing.cluster` so that what only reads a version (a report naming the Kueue it
was measured against) does not count as running the local cluster (`benchmarks.measured_code`).
"""

from __future__ import annotations

from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parents[3] / "hack" / "versions.env"


def pinned_version(name: str) -> str:
    """The version hack/versions.env pins for NAME (`KUBERNETES_VERSION`, `KUEUE_VERSION`...), as written."""
    for line in VERSIONS_FILE.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise RuntimeError(f"hack/versions.env pins no {name}")
