"""benchmarks/tenant_objects.py's pure parts: the largest admissible job, the chart's limit, the figures."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from aisched.api import TrainingJob
from aisched.api.crd import all_crds
from aisched.api.pod_template import MAX_ARGS, MAX_CONTAINERS, MAX_ENV, MAX_VOLUMES
from aisched.controller.main import WATCH_PAGE
from aisched.controller.templates import elided, template_bytes
from benchmarks import tenant_objects
from benchmarks.tenant_objects import (
    DEFAULT_OBJECT_BYTES,
    json_bytes,
    largest_job,
    memory_limit_mib,
    quantity_mib,
    summarize,
)
from tests.unit.api.server_like import server_rejections

CRD = next(crd for crd in all_crds() if crd["spec"]["names"]["kind"] == "TrainingJob")


def test_the_largest_job_is_admitted_by_the_model_with_every_list_at_its_bound() -> None:
    # The model refuses what the CRD refuses (tests/unit/api); the CRD itself takes 20 s over it here.
    job = largest_job("big", 1_000_000)
    spec = TrainingJob.model_validate(job).spec
    containers = spec.template["spec"]["containers"]
    assert len(containers) == len(spec.template["spec"]["initContainers"]) == MAX_CONTAINERS
    assert {len(c["env"]) for c in containers} == {MAX_ENV}
    assert {len(c["args"]) for c in containers} == {MAX_ARGS}


def test_the_largest_job_fills_the_bytes_asked_for_with_what_the_closed_template_takes() -> None:
    bare = json_bytes(largest_job("big", 0))
    job = largest_job("big", bare + 30_000)
    assert bare + 30_000 - 256 <= json_bytes(job) <= bare + 30_000
    spec = job["spec"]["template"]["spec"]
    assert len(spec["volumes"]) == MAX_VOLUMES  # empty objects first: the most memory a byte
    full = largest_job("big", DEFAULT_OBJECT_BYTES)
    assert DEFAULT_OBJECT_BYTES - 256 <= json_bytes(full) <= DEFAULT_OBJECT_BYTES
    terms = full["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [""] * 256
    # One container's worth, through the CRD's own schema and rules (all of it takes 20 s here).
    template = job["spec"]["template"]["spec"]
    template["containers"], template["initContainers"] = template["containers"][:1], template["initContainers"][:1]
    assert server_rejections(CRD, job) == []
    assert set(largest_job("big", bare)["spec"]["template"]["spec"]) == {"containers", "initContainers"}


def test_the_operator_keeps_a_few_kib_of_the_largest_job() -> None:
    job = largest_job("big", 1_400_000)
    kept = elided(job)
    assert kept is not None
    # The closed schema still admits ~550 KB of node affinity, DNS options and projected volume
    # sources, which the largest job fills: the record keeps none of it, only what the pod policy
    # and the placement read (controller/templates.py).
    pod = kept["spec"]["template"]["spec"]
    assert "affinity" not in pod and "dnsConfig" not in pod
    assert template_bytes(kept["spec"]["template"]) < 8192


def test_a_watch_page_of_the_largest_jobs_parsed_is_a_sixth_of_the_chart_limit() -> None:
    # kopf holds at most a page of its list parsed (its workers let go of a body once handled):
    # that page, not the number of jobs, is what a restart's first list costs over the records.
    text = json.dumps(largest_job("big", DEFAULT_OBJECT_BYTES), separators=(",", ":"))
    tracemalloc.start()
    try:
        parsed = json.loads(text)
        parsed_bytes, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed["metadata"]["name"] == "big"
    # Empty objects and strings, the most memory a byte the closed template admits: 6.7 times its bytes
    # (20 MiB for 1.4 MB, 15 times, while the template was open to `{}` padding).
    assert parsed_bytes > 5 * len(text)
    limit_bytes = memory_limit_mib(tenant_objects.VALUES.read_text()) * 2**20
    assert WATCH_PAGE * parsed_bytes < limit_bytes / 6


def test_quantities_in_mib() -> None:
    assert quantity_mib("1Gi") == 1024
    assert quantity_mib("512Mi") == 512
    assert quantity_mib("1G") == pytest.approx(953.67, abs=0.01)
    assert quantity_mib("1048576") == 1
    with pytest.raises(ValueError, match="not a memory quantity"):
        quantity_mib("lots")


def test_the_chart_limit_is_read_from_its_values() -> None:
    assert memory_limit_mib(tenant_objects.VALUES.read_text()) == 1024
    assert memory_limit_mib("resources:\n  limits:\n    memory: 2Gi\n") == 2048


def test_the_figures_give_each_jobs_cost_and_the_worst_peak_against_the_limit() -> None:
    readings = {
        "idle_rss_mib": 100.0,
        "peak_rss_mib": 400.0,
        "settled_rss_mib": 150.0,
        "restart_peak_rss_mib": 512.0,
        "restart_settled_rss_mib": 110.0,
    }
    figures = summarize(readings, jobs=1000, object_bytes=1_400_000, limit_mib=1024)
    assert figures["settled_kib_per_job"] == 51.2
    assert figures["restart_kib_per_job"] == 10.2
    assert figures["peak_fraction_of_limit"] == 0.5
    assert "512.0 MiB" in tenant_objects.report({**figures, "restart_peak_rss_mib": 512.0})


def test_fewer_jobs_than_the_quota_are_projected_to_it_from_what_each_one_kept() -> None:
    readings = {
        "idle_rss_mib": 100.0,
        "half_settled_rss_mib": 109.0,
        "peak_rss_mib": 200.0,
        "settled_rss_mib": 110.0,
        "restart_peak_rss_mib": 300.0,
        "restart_settled_rss_mib": 120.0,
        "pymalloc_restart_peak_rss_mib": 320.0,
        "pymalloc_restart_settled_rss_mib": 140.0,
    }
    figures = summarize(readings, jobs=10, object_bytes=1_400_000, limit_mib=1024, quota_jobs=200)
    assert figures["restart_kib_per_job"] == 2048.0
    assert figures["marginal_kib_per_job"] == 204.8  # the second 5 jobs added 1 MiB
    assert figures["pymalloc_restart_kib_per_job"] == 4096.0
    # The worst peak, and each of the 190 jobs not created keeping what the worst-kept one did.
    assert figures["projected"] == {"jobs": 200, "peak_rss_mib": 300.0 + 2.0 * 190, "fraction_of_limit": 0.664}
    assert "projected" not in summarize(readings, jobs=200, object_bytes=1_400_000, limit_mib=1024, quota_jobs=200)
    assert "projected to 200 jobs: 680.0 MiB (66% of the limit)" in tenant_objects.report(figures)
    assert "on pymalloc, restarted" in tenant_objects.report(figures)
