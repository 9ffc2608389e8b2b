"""benchmarks/tenant_records.py's pure parts: the shapes are jobs the CRD admits, and the figures."""

from __future__ import annotations

import json

from aisched.api import TrainingJob
from aisched.api.pod_template import MAX_CAPABILITIES, MAX_CONTAINERS, MAX_PORTS, MAX_VOLUME_MOUNTS
from aisched.controller.templates import elided
from benchmarks.tenant_objects import DEFAULT_OBJECT_BYTES
from benchmarks.tenant_records import BUILDERS, kept_job, summarize


def test_every_shape_is_a_job_the_model_admits() -> None:
    for shape, build in BUILDERS.items():
        assert TrainingJob.model_validate(build(f"job-{shape}")).metadata["name"] == f"job-{shape}"


def test_the_kept_shape_fills_the_bytes_with_every_kept_list_at_its_bound() -> None:
    job = kept_job("big")
    assert DEFAULT_OBJECT_BYTES - 1_000 < len(json.dumps(job, separators=(",", ":"))) <= DEFAULT_OBJECT_BYTES
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == MAX_CONTAINERS
    assert {len(c["ports"]) for c in containers} == {MAX_PORTS}
    assert {len(c["volumeMounts"]) for c in containers} == {MAX_VOLUME_MOUNTS}
    assert {len(c["securityContext"]["capabilities"]["add"]) for c in containers} == {MAX_CAPABILITIES}


def test_the_record_of_the_kept_shape_holds_one_host_port_one_mount_a_volume_and_every_capability() -> None:
    kept = elided(kept_job("big"))
    assert kept is not None
    pod = kept["spec"]["template"]["spec"]
    everyone = [*pod["initContainers"], *pod["containers"]]
    assert sum(len(c["ports"]) for c in everyone) == 1
    assert sum(len(c["volumeMounts"]) for c in everyone) == len(pod["volumes"])
    assert (
        sum(len(c["securityContext"]["capabilities"]["add"]) for c in everyone) == 2 * MAX_CONTAINERS * MAX_CAPABILITIES
    )
    assert {tuple(c["securityContext"]["capabilities"]["drop"]) for c in everyone} == {()}


def test_the_figures_are_per_job_above_idle_and_projected_to_the_quota() -> None:
    readings = {"kept": {"object_bytes": 10, "idle_rss_mib": 100.0, "settled_rss_mib": 200.0}}
    figures = summarize(readings, jobs=100, quota_jobs=200, limit_mib=1024.0)
    shape = figures["shapes"]["kept"]
    assert shape["kib_per_job"] == 1024.0
    assert shape["projected_rss_mib"] == 300.0
    assert shape["projected_fraction_of_limit"] == round(300 / 1024, 3)
