"""Step 1 of a pass: the Service in front of a service's replicas exists and is ours.

Applied on every spec change (generation), and again each relist period in case someone deleted
it; in between, a pass costs no API call. A Service of that name that is someone else's is left
as it is, and asked about again next pass: its owner may delete it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aisched.api.inference_service import InferenceService
from aisched.controller.serving.replica_pods import ServiceKey
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import build_service


@dataclass
class ServiceFront:
    kube: KubeClient
    relist_seconds: float
    clock: Callable[[], float]
    """Monotonic seconds."""
    _applied: dict[ServiceKey, tuple[int | None, float]] = field(default_factory=dict)
    """Per service, the generation last applied and when."""

    async def ensure(self, key: ServiceKey, service: InferenceService) -> bool:
        """The Service in front is ours and up to date; False when its name is someone else's Service."""
        generation = service.metadata.get("generation")
        applied = self._applied.get(key)
        if applied is not None and applied[0] == generation and self.clock() - applied[1] < self.relist_seconds:
            return True
        if not await self.kube.apply_service(build_service(service)):
            self._applied.pop(key, None)
            return False
        self._applied[key] = (generation, self.clock())
        return True

    def forget(self, key: ServiceKey) -> None:
        self._applied.pop(key, None)
