"""The scheduling cycle, neutral: every kind of work decided at once from the one cluster state."""

from aisched.controller.cycle.kind import Asked, CycleKind, CycleView, Decided
from aisched.controller.cycle.replicas import ReplicaAsksKind
from aisched.controller.cycle.scheduling import SchedulingCycle

__all__ = ["Asked", "CycleKind", "CycleView", "Decided", "ReplicaAsksKind", "SchedulingCycle"]
