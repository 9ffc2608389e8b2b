"""Namespaces the API server said are being deleted: both controllers leave their objects alone a while.

Until the namespace controller deletes them, a namespace's TrainingJobs would otherwise be admitted
and its InferenceServices granted replicas, holding GPUs no pod can ever use there, and each would
fail a reconcile (a tenant deleting a namespace of a thousand jobs would stall everyone else). A
refused create says so; the namespace is left alone for `CLOSING_NAMESPACE_SECONDS`, then asked
again (a namespace of the same name may have been made since).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
CLOSING_NAMESPACE_SECONDS = 60.0


class ClosingNamespaces:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._until: dict[str, float] = {}
        """Each namespace said to be closing, with when (monotonic) that is next asked again."""

    def closed(self, namespace: str) -> None:
        """NAMESPACE is being deleted, as a create there was just refused."""
        if namespace not in self._until:
            log.info("namespace %s is being deleted: its TrainingJobs and InferenceServices are left alone", namespace)
        self._until[namespace] = self._monotonic() + CLOSING_NAMESPACE_SECONDS

    def closing(self, namespace: str) -> bool:
        until = self._until.get(namespace)
        if until is None:
            return False
        if self._monotonic() < until:
            return True
        del self._until[namespace]
        return False
