"""The operator's own label and annotation keys are its word on a pod, never a template's.

The operator reads its keys back off the pods it made: whose worker a pod is (`aisched.io/kind`,
`aisched.io/job-name`), which replica, and the share of a GPU it holds (`aisched.io/gpu-share`),
which the inventory counts on its node. A template that set them could pass its pods off as
another job's, or make a node look full to everyone else. So a template may set no key under
`aisched.io/`, except the local cluster's KWOK test hooks (`aisched.io/fake-*`: when a simulated
worker ends), which nothing reads on real nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aisched.api.common import cel

RESERVED_PREFIX: Final = "aisched.io/"
TEST_HOOK_PREFIX: Final = "aisched.io/fake-"
METADATA_MAPS: Final = ("labels", "annotations")


def reserved(key: str) -> bool:
    return key.startswith(RESERVED_PREFIX) and not key.startswith(TEST_HOOK_PREFIX)


def reserved_message(where: str) -> str:
    return (
        f"template.metadata.{where} may not set keys under {RESERVED_PREFIX}: the operator writes "
        f"and reads those on its pods ({TEST_HOOK_PREFIX}* excepted, the local cluster's test hooks)"
    )


# The rules of every spec with a pod template (TrainingJob, InferenceService).
RESERVED_KEY_RULES = [
    cel(
        f"!has(self.template.metadata) || !has(self.template.metadata.{where}) || "
        f"self.template.metadata.{where}.all(k, "
        f"!k.startsWith('{RESERVED_PREFIX}') || k.startsWith('{TEST_HOOK_PREFIX}'))",
        reserved_message(where),
    )
    for where in METADATA_MAPS
]


def check_reserved_keys(template: Mapping[str, Any]) -> None:
    """The same rules as RESERVED_KEY_RULES, with their messages, for the models."""
    metadata = template.get("metadata") or {}
    for where in METADATA_MAPS:
        if any(reserved(key) for key in metadata.get(where) or {}):
            raise ValueError(reserved_message(where))


def without_reserved(keys: Mapping[str, str] | None) -> dict[str, str]:
    """KEYS of a template with the operator's own left out: for objects written before the rule."""
    return {key: value for key, value in (keys or {}).items() if not reserved(key)}
