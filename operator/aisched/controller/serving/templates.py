"""An InferenceService's pod template as the controller keeps it: a large one elided, as a
TrainingJob's is (`aisched.controller.templates`), and read whole again to build replicas.

Replicas are matched to their service's template by a hash of it (`template_hash`), on every pass:
the hash of a large template is taken from the whole object when its watch event arrives, before
the elision, so the replicas it made still count as current; the whole template is read from the
API server only when replicas are made.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from aisched.api.inference_service import InferenceService
from aisched.controller.serving.autoscaling import PLURAL
from aisched.controller.serving.replica_pods import ServiceKey
from aisched.controller.templates import elided
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import template_hash

log = logging.getLogger(__name__)


class TemplateChangedError(Exception):
    """The service as stored now is not the one a pass planned for: the next pass plans again."""


@dataclass
class ServiceTemplates:
    kube: KubeClient
    _hashes: dict[ServiceKey, str] = field(default_factory=dict)
    """The whole template's hash of each service kept elided."""

    def kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What to keep of OBJ, a service as its watch event brings it."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        kept = elided(obj)
        try:
            whole = InferenceService.model_validate(obj) if kept is not None else None
        except ValidationError:
            whole = None  # kept whole, for the error its reconcile logs
        if kept is None or whole is None:
            self._hashes.pop(key, None)
            return obj
        self._hashes[key] = template_hash(whole)
        return kept

    def current_hash(self, service: InferenceService) -> str:
        """The hash of SERVICE's whole template (its replicas of another hash run an old one)."""
        held = self._hashes.get((service.metadata["namespace"], service.metadata["name"]))
        return held if held is not None else template_hash(service)

    async def whole(self, service: InferenceService) -> InferenceService | None:
        """SERVICE with the whole of its template, to build replicas from; None when it is gone."""
        key = (service.metadata["namespace"], service.metadata["name"])
        if key not in self._hashes:
            return service
        current = await self.kube.get_custom(PLURAL, *key)
        if current is None:
            return None
        try:
            full = InferenceService.model_validate(current)
        except ValidationError as error:
            raise TemplateChangedError(
                f"InferenceService {key[0]}/{key[1]} as stored now cannot be read: {error}"
            ) from None
        if template_hash(full) != self._hashes.get(key):
            raise TemplateChangedError(f"InferenceService {key[0]}/{key[1]}'s template changed since this pass began")
        return service.model_copy(update={"spec": service.spec.model_copy(update={"template": full.spec.template})})

    def forget(self, key: ServiceKey) -> None:
        self._hashes.pop(key, None)
