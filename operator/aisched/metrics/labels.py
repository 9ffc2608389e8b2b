"""The label value sets, buckets and checks every metric family shares.

Label values come from short, fixed sets that each help text names; `check` refuses a
value outside its set, so a typo at a call site cannot create new series.
"""

from __future__ import annotations

from collections.abc import Iterable

from aisched.api.common import CapacityType
from aisched.api.training_job import TrainingJobPhase
from aisched.policy.autoscale import ReasonCode
from aisched.policy.topology import LOCAL_TOPOLOGY
from aisched.policy.workloads.model import WorkloadKind

PREFIX = "aisched"

KINDS = ("TrainingJob", "InferenceService")
# The other kinds' workloads aisched schedules, by `<plural>.<group>` (`policy.workloads.model.WorkloadKind`).
WORKLOAD_KINDS = tuple(kind.value for kind in WorkloadKind)
WORKLOAD_STATES = ("Waiting", "Running")
RECONCILED_KINDS = (*KINDS, "Queue", "Node", "Pod")
PHASES = tuple(phase.value for phase in TrainingJobPhase)
FINISHED_PHASES = (TrainingJobPhase.SUCCEEDED.value, TrainingJobPhase.FAILED.value)
CAPACITY_TYPES = tuple(capacity.value for capacity in CapacityType)
# The levels of the operator's topology (settings.topology), tightest first: by default the local
# cluster's. "Cluster": the gang spans the widest level, so no single domain holds it.
TOPOLOGY_LEVELS = LOCAL_TOPOLOGY.names
SPREAD_LEVELS = (*TOPOLOGY_LEVELS, "Cluster")
PLACEMENT_RESULTS = ("Placed", "NoFit")
INTERRUPTION_SIGNALS = ("NodeTaint", "DisruptionTarget", "NodeLost")
CHECKPOINT_REASONS = ("Periodic", "Interruption", "Preemption", "Suspend", "Deferral")
RESTART_REASONS = ("Interruption", "WorkerFailure", "Preemption", "Resize")
CARBON_MODES = ("Forecast", "Threshold")
CARBON_SOURCES = ("ElectricityMaps", "WattTime", "NationalGrid", "Prometheus", "File")
AUTOSCALER_DIRECTIONS = ("Up", "Down", "None")
AUTOSCALER_REASONS = tuple(reason.value for reason in ReasonCode)

# Seconds to days: jobs wait from moments (idle cluster) to a day (quota, deferral).
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
# Placement is in-memory search over the inventory: sub-millisecond to seconds on 1,000+ nodes.
PLACEMENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
GC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
GC_GENERATIONS = ("0", "1", "2")
DOMAIN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def one_of(allowed: Iterable[str]) -> str:
    """ALLOWED as a help text names them."""
    return "|".join(allowed)


def check(label: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"metric label {label}={value!r} is not one of {one_of(allowed)}")
    return value
