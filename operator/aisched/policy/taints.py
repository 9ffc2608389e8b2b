"""Node taints and pod tolerations, matched as the kube-scheduler matches them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @classmethod
    def from_dict(cls, taint: Mapping[str, Any]) -> Taint:
        """From a Node's `spec.taints[]` entry."""
        return cls(
            key=str(taint["key"]),
            value=str(taint.get("value") or ""),
            effect=TaintEffect(taint.get("effect") or TaintEffect.NO_SCHEDULE),
        )

    @property
    def repels(self) -> bool:
        """PreferNoSchedule is a wish of the node's owner, not a rule; the others keep pods off."""
        return self.effect != TaintEffect.PREFER_NO_SCHEDULE

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, matched as the kube-scheduler matches it."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None

    @classmethod
    def from_dict(cls, toleration: Mapping[str, Any]) -> Toleration:
        """From a pod spec's `tolerations[]` entry."""
        effect = toleration.get("effect")
        return cls(
            key=str(toleration.get("key") or ""),
            operator=TolerationOperator(toleration.get("operator") or TolerationOperator.EQUAL),
            value=str(toleration.get("value") or ""),
            effect=TaintEffect(effect) if effect else None,
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if not self.key:  # an empty key with Exists tolerates every taint
            return self.operator == TolerationOperator.EXISTS
        if self.key != taint.key:
            return False
        return self.operator == TolerationOperator.EXISTS or self.value == taint.value
