"""Placement across clusters and regions: which worker cluster a job goes to, and when it starts there.

Pure, like the rest of `policy/`: the manager's dispatcher and the simulator
(`aisched.sim.regions`) call :func:`choose_region` with the offers the worker clusters
made and the time.
"""

from aisched.policy.regions.choice import (
    ChoiceReason,
    RegionChoice,
    RegionEstimate,
    RegionJob,
    RegionOffer,
    RegionSettings,
    choose_region,
    estimate,
)

__all__ = [
    "ChoiceReason",
    "RegionChoice",
    "RegionEstimate",
    "RegionJob",
    "RegionOffer",
    "RegionSettings",
    "choose_region",
    "estimate",
]
