"""Spot or on-demand for each waiting job, and the gang request that choice is made on.

The choice itself is `policy.spot.choose_capacity`; this part asks whether a gang of the job's
shape fits on spot capacity now (once per shape and cycle: thousands of waiting jobs come in a
few shapes), or will once the fleet grows, and reads back a deadline's earlier pin to on-demand.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from aisched.api import CapacityType, SpotPolicy, TrainingJob
from aisched.controller.provisioning import NodeProvisioner
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.placement import GangRequest, gang_fits
from aisched.policy.shared_room import ShareShape
from aisched.policy.spot import CapacityChoice, CapacityDecision, SpotJob, choose_capacity
from aisched.policy.topology import Level, Topology
from aisched.settings import Settings

DEADLINE_NEEDS_ON_DEMAND = "DeadlineNeedsOnDemand"


class CapacityChooser:
    def __init__(self, settings: Settings, provisioner: NodeProvisioner | None) -> None:
        self._settings = settings
        self._provisioner = provisioner
        # Whether a gang of each shape fits on spot capacity, for the scheduling cycle under way.
        self._spot_fits: dict[GangRequest, bool] = {}

    def begin_cycle(self) -> None:
        """The snapshot is the new cycle's: so are the answers about it."""
        self._spot_fits.clear()

    def choose(
        self, job: TrainingJob, snapshot: ClusterSnapshot, doomed: frozenset[str], now: datetime
    ) -> CapacityDecision:
        spec = job.spec
        spot_fits = False
        if spec.spot.policy != SpotPolicy.NEVER:
            # An elastic job starts at what fits, down to its minimum: spot has room for it when that fits.
            whole = gang_request(job, doomed, (CapacityType.SPOT,), snapshot.topology)
            on_spot = replace(whole, replicas=spec.min_replicas or spec.replicas)
            fits = self._spot_fits.get(on_spot)
            if fits is None:
                fits = self._spot_fits[on_spot] = gang_fits(on_spot, snapshot)
            # A fleet that grows has spot whenever it offers it: nodes are asked for after the cycle.
            spot_fits = fits or (
                self._provisioner is not None and self._provisioner.offers(CapacityType.SPOT, spec.gpu_type)
            )
        capacity = next((c for c in job.status.conditions if c.type == "Capacity"), None)
        pinned = None
        if capacity is not None and capacity.reason == DEADLINE_NEEDS_ON_DEMAND:
            pinned = CapacityDecision(CapacityChoice.ON_DEMAND, capacity.reason, capacity.message, True)
        return choose_capacity(
            SpotPolicy(spec.spot.policy),
            SpotJob(
                # Conservative: work done before an interruption is not credited, so
                # the switch to on-demand comes early rather than late.
                remaining_work_s=float(spec.expected_duration_seconds or 0),
                restart_overhead_s=self._settings.restart_overhead_seconds,
            ),
            now=now,
            deadline=spec.deadline,
            spot_available=spot_fits,
            decision_period_s=self._settings.resync_seconds,
            previous=pinned,
        )


def was_pinned(job: TrainingJob) -> bool:
    """A deadline had pinned JOB to on-demand capacity before this cycle."""
    return any(c.type == "Capacity" and c.reason == DEADLINE_NEEDS_ON_DEMAND for c in job.status.conditions)


def gang_request(
    job: TrainingJob, doomed: frozenset[str], capacity_types: tuple[CapacityType, ...], topology: Topology
) -> GangRequest:
    spec = job.spec
    tolerations = tuple(Toleration.from_dict(t) for t in (spec.template.get("spec") or {}).get("tolerations", []))
    return GangRequest(
        replicas=spec.replicas,
        gpus_per_replica=spec.gpus_per_replica,
        gpu_types=frozenset({spec.gpu_type}) if spec.gpu_type else None,
        required_level=_level(topology, spec.topology.required_level),
        preferred_level=_level(topology, spec.topology.preferred_level),
        tolerations=tolerations,
        capacity_types=capacity_types,
        excluded_nodes=doomed,
        share=ShareShape.of(spec.gpu_share),
    )


def _level(topology: Topology, name: str | None) -> Level | None:
    return topology.find(name) if name else None
