"""The local topology's levels, as tests name them (aisched.policy.topology.LOCAL_TOPOLOGY)."""

from aisched.policy.topology import LOCAL_TOPOLOGY

NODE, NVLINK_DOMAIN, RACK, ZONE = (LOCAL_TOPOLOGY.level(name) for name in ("Node", "NVLinkDomain", "Rack", "Zone"))
LEVELS = LOCAL_TOPOLOGY.levels
"""Tightest first."""
