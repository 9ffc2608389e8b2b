"""MIG profiles and their valid placements, as data; layouts of one GPU, and the layout aisched asks for.

A MIG-capable GPU has 8 placement slots (its memory slices). A profile occupies `size`
consecutive slots starting only at its allowed `starts` (what `nvidia-smi mig -lgipp` lists:
e.g. a 3g instance at slot 0 or 4, never at 2); instances never overlap, and the allowed starts
keep the compute slices used at 7 or fewer. `compute` is the profile's share of the GPU's 7
compute slices. Profiles are named per GPU model (1g.10gb on H100 is 1g.5gb on A100-40GB);
a request names the model-independent class (`1g`, `2g`, ...) and each model's table maps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from aisched.api.sharing import MIG_PROFILES

SLOTS = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    name: str
    kind: str  # the model-independent class a request names: 1g, 2g, 3g, 4g, 7g
    compute: int
    size: int
    starts: tuple[int, ...]


def _profiles(memory: Mapping[str, str]) -> dict[str, MigProfile]:
    shapes = {
        "1g": (1, 1, tuple(range(7))),
        "2g": (2, 2, (0, 2, 4)),
        "3g": (3, 4, (0, 4)),
        "4g": (4, 4, (0,)),
        "7g": (7, 8, (0,)),
    }
    return {kind: MigProfile(f"{kind}.{memory[kind]}", kind, *shapes[kind]) for kind in shapes}


# The profile names of each model are the API's data (aisched.api.sharing.MIG_PROFILES).
MIG_MODELS: dict[str, dict[str, MigProfile]] = {
    model: _profiles({name.split(".", 1)[0]: name.split(".", 1)[1] for name in names})
    for model, names in MIG_PROFILES.items()
}
KINDS = ("1g", "2g", "3g", "4g", "7g")

# A layout: (kind, start slot) per instance.
Layout = tuple[tuple[str, int], ...]


def occupied(layout: Layout, profiles: Mapping[str, MigProfile]) -> int:
    """Bitmask of the slots LAYOUT's instances take; ValueError if one is misplaced or they overlap."""
    mask = 0
    for kind, start in layout:
        profile = profiles[kind]
        if start not in profile.starts:
            raise ValueError(f"{profile.name} cannot start at slot {start}")
        bits = ((1 << profile.size) - 1) << start
        if mask & bits:
            raise ValueError(f"{profile.name} at slot {start} overlaps another instance")
        mask |= bits
    if sum(profiles[kind].compute for kind, _ in layout) > COMPUTE_SLICES:
        raise ValueError("more than 7 compute slices")
    return mask


def is_valid(layout: Layout, profiles: Mapping[str, MigProfile]) -> bool:
    try:
        occupied(layout, profiles)
    except ValueError:
        return False
    return True


def free_start(layout: Layout, kind: str, profiles: Mapping[str, MigProfile]) -> int | None:
    """The first start at which one more KIND instance fits beside LAYOUT, or None."""
    profile = profiles[kind]
    for start in profile.starts:
        candidate = (*layout, (kind, start))
        if is_valid(candidate, profiles):
            return start
    return None


@cache
def maximal_layouts(model: str) -> tuple[Layout, ...]:
    """Every layout of MODEL to which no further instance can be added (instances in slot order)."""
    profiles = MIG_MODELS[model]
    found: set[Layout] = set()

    def extend(layout: Layout) -> None:
        grown = False
        last = max((start for _, start in layout), default=-1)
        for kind in KINDS:
            for start in profiles[kind].starts:
                if start > last and is_valid((*layout, (kind, start)), profiles):
                    grown = True
                    extend((*layout, (kind, start)))
        if not grown and not any(free_start(layout, kind, profiles) is not None for kind in KINDS):
            found.add(layout)

    extend(())
    return tuple(sorted(found))


def layout_for(model: str, kind: str, demand: Mapping[str, float]) -> Layout:
    """The maximal layout holding a KIND instance whose instances best match DEMAND (share per kind).

    Score: the demanded compute the layout's instances could serve, each kind counted up to its
    share of the GPU's 7 slices; ties to the layout with fewer, larger instances.
    """
    profiles = MIG_MODELS[model]
    total = sum(demand.values()) or 1.0

    def served(layout: Layout) -> tuple[float, int]:
        held: dict[str, int] = {}
        for k, _ in layout:
            held[k] = held.get(k, 0) + profiles[k].compute
        useful = sum(min(held.get(k, 0), COMPUTE_SLICES * demand.get(k, 0.0) / total) for k in KINDS)
        return useful, -len(layout)

    candidates = [layout for layout in maximal_layouts(model) if any(k == kind for k, _ in layout)]
    return max(candidates, key=served)


def named(layout: Iterable[tuple[str, int]], model: str) -> Sequence[str]:
    """The profile names of LAYOUT on MODEL, as a mig.config would list them."""
    return [MIG_MODELS[model][kind].name for kind, _ in layout]


# mig-parted's stock configurations: all-1g and all-balanced (2 x 1g, 1 x 2g, 1 x 3g).
STATIC_LAYOUTS: dict[str, Layout] = {
    "all_1g": tuple(("1g", start) for start in range(7)),
    "all_balanced": (("1g", 0), ("1g", 1), ("2g", 2), ("3g", 4)),
    "whole_gpu": (("7g", 0),),
}
