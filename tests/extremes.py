"""Hypothesis strategies for TrainingJobs at the edges of what the CRD admits.

Not plausible jobs: the values a user (or a typo, or a script) can get past the
API server's validation. Integers without a maximum reach int64's, times reach
year 1 and year 9999, names are as long and as odd as the name rules allow, and
the pod template (kept open in the schema) holds any JSON at all. Tests filter
them through the generated CRD (`server_rejections`) so that only what the API
server would store reaches the operator.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from tests.builders import DEFAULT_TEMPLATE

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# A few ordinary values, the bounds around them, and int64's edges.
_EDGE_INTS = [0, 1, 2, 59, 60, 3600, 86400, 2**31 - 1, 2**31, 2**53 + 1, INT64_MAX - 1, INT64_MAX]


def int_at_edges(minimum: int = INT64_MIN) -> st.SearchStrategy[int]:
    """Integers at or above MINIMUM, weighted to the values that break arithmetic."""
    edges = [v for v in (*_EDGE_INTS, minimum, minimum + 1, INT64_MIN) if v >= minimum]
    return st.one_of(st.sampled_from(sorted(set(edges))), st.integers(min_value=minimum, max_value=INT64_MAX))


# RFC 3339 as the API server stores it: any year 0001-9999, any offset it can parse.
_EDGE_TIMES = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
    "1970-01-01T00:00:00Z",
    "2025-12-31T23:59:59Z",
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:01Z",
    "2026-01-02T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-12:00",  # after year 9999 in UTC
]


def rfc3339_times() -> st.SearchStrategy[str]:
    offsets = st.sampled_from(["Z", "+00:00", "+14:00", "-12:00", "+05:30"])
    drawn = st.builds(
        lambda when, offset: when.isoformat(timespec="seconds") + offset,
        st.datetimes(),
        offsets,
    )
    return st.one_of(st.sampled_from(_EDGE_TIMES), drawn)


# Custom resource names are DNS-1123 subdomains: dots, leading digits, up to 253 characters.
_SUBDOMAIN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-."


def odd_names(max_length: int = 63) -> st.SearchStrategy[str]:
    """Names the API server takes for a custom resource, weighted to long and odd ones."""
    drawn = st.text(_SUBDOMAIN_CHARS, min_size=1, max_size=max_length).filter(
        lambda s: s[0].isalnum() and s[-1].isalnum() and ".." not in s and ".-" not in s and "-." not in s
    )
    edges = ["a", "0", "a" * 48, "a" * 49, "9" * 48, "a.b", "a-" * 23 + "z", "x" * max_length]
    return st.one_of(st.sampled_from(edges), drawn)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_ODD_STRINGS = st.one_of(
    st.sampled_from(["", "1.5", "abc", "-1", "1e3", "8Gi", "x" * 300, "\u00e9\u0000", "9223372036854775808"]),
    st.text(max_size=12),
)
_QUANTITIES = st.one_of(
    st.sampled_from(["1.5", "abc", "", "-1", "1e3", "8Gi", "500m", "1e999999999", "9" * 40]),
    st.integers(INT64_MIN, INT64_MAX),
    st.text(max_size=6),
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """VALID most of the time, and now and then any JSON at all (which the schema should refuse)."""
    return st.integers(0, 9).flatmap(lambda roll: _JSON if roll == 0 else valid)


_STRING_MAPS = st.dictionaries(_ODD_STRINGS, _ODD_STRINGS, max_size=3)
_TOLERATIONS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": _ODD_STRINGS,
            "operator": st.sampled_from(["Equal", "Exists", ""]),
            "value": _ODD_STRINGS,
            "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", ""]),
            "tolerationSeconds": st.sampled_from([INT64_MIN, -1, 0, INT64_MAX]),
        },
    ),
    max_size=3,
)
_ENV = st.lists(
    st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8)}, optional={"value": _ODD_STRINGS, "x": _JSON}),
    max_size=3,
)


@st.composite
def odd_templates(draw: st.DrawFn) -> dict[str, Any]:
    """A pod template with odd contents where the schema keeps it open, and now and then where it does not."""
    template = copy.deepcopy(DEFAULT_TEMPLATE)
    spec = template["spec"]
    container = spec["containers"][0]
    if draw(st.booleans()):
        container["env"] = draw(_mostly(_ENV))
    if draw(st.booleans()):
        amounts = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu", ""]), _QUANTITIES, max_size=2)
        container["resources"] = draw(
            _mostly(st.fixed_dictionaries({}, optional={"limits": amounts, "requests": amounts}))
        )
    for field in ("ports", "command", "securityContext"):  # fields the schema keeps open
        if draw(st.booleans()):
            container[field] = draw(_JSON)
    if draw(st.booleans()):
        spec["containers"].append(
            {"name": draw(st.text(min_size=1, max_size=4)), "image": draw(st.text(min_size=1, max_size=8))}
        )
    for field, values in (
        ("tolerations", _mostly(_TOLERATIONS)),
        ("nodeSelector", _mostly(_STRING_MAPS)),
        ("initContainers", _JSON),
        ("schedulingGates", _JSON),
        ("affinity", _JSON),
    ):
        if draw(st.booleans()):
            spec[field] = draw(values)
    if draw(st.booleans()):
        template["metadata"] = {"labels": draw(_mostly(_STRING_MAPS)), "annotations": draw(_mostly(_STRING_MAPS))}
    return template


# Names the CRD admits for a TrainingJob (and a queue), up to the longest.
_JOB_NAMES = st.one_of(st.just("a" * 48), st.from_regex(r"\A[a-z]([-a-z0-9]{0,46}[a-z0-9])?\Z"))
_LABEL_VALUES = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


def _optional(draw: st.DrawFn, target: dict[str, Any], field: str, values: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        target[field] = draw(values)


@st.composite
def extreme_training_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """A TrainingJob object with every field at an edge the schema may admit (filter with the CRD)."""
    replicas = draw(st.sampled_from([1, 2, 4, 4096]) | st.integers(1, 4096))
    spec: dict[str, Any] = {
        "replicas": replicas,
        "gpusPerReplica": draw(st.sampled_from([1, 8, 64]) | st.integers(1, 64)),
        "template": draw(odd_templates()),
    }
    if draw(st.booleans()):
        spec["minReplicas"], spec["maxReplicas"] = 1, draw(st.sampled_from([replicas, 4096]))
    _optional(draw, spec, "priority", st.sampled_from([-1_000_000, 0, 1_000_000_000]))
    _optional(draw, spec, "gpuType", st.one_of(_LABEL_VALUES, _LABEL_VALUES, st.text(max_size=70)))
    _optional(draw, spec, "queue", st.one_of(odd_names(), _JOB_NAMES))
    _optional(draw, spec, "expectedDurationSeconds", int_at_edges(1))
    _optional(draw, spec, "deadline", rfc3339_times())
    if "deadline" in spec and "expectedDurationSeconds" not in spec and draw(st.booleans()):
        spec["expectedDurationSeconds"] = draw(st.sampled_from([1, 3600, 366 * 86400]))
    _optional(draw, spec, "suspend", st.booleans())
    if draw(st.booleans()):
        spec["spot"] = {"policy": draw(st.sampled_from(["Never", "Prefer", "Only"]))}
    if draw(st.booleans()):
        spec["topology"] = {"requiredLevel": draw(st.sampled_from(["Node", "Rack", "Zone"]))}
    if draw(st.booleans()):
        checkpoint: dict[str, Any] = {}
        _optional(draw, checkpoint, "path", st.text(max_size=1030))
        _optional(draw, checkpoint, "intervalSeconds", st.sampled_from([30, 86400]))
        _optional(draw, checkpoint, "costSeconds", st.sampled_from([1, 3600]))
        spec["checkpoint"] = checkpoint
    if draw(st.booleans()):
        carbon: dict[str, Any] = {"deferrable": draw(st.booleans())}
        _optional(draw, carbon, "mode", st.sampled_from(["Forecast", "Threshold"]))
        _optional(draw, carbon, "maxDelaySeconds", st.sampled_from([0, 1, 30 * 86400]))
        _optional(draw, carbon, "thresholdGramsPerKWh", st.sampled_from([1e-300, 0.5, 2000.0]))
        _optional(draw, carbon, "interruptible", st.booleans())
        _optional(draw, carbon, "region", st.text(max_size=130))
        spec["carbon"] = carbon
    if draw(st.booleans()):
        run_policy: dict[str, Any] = {}
        _optional(draw, run_policy, "activeDeadlineSeconds", int_at_edges(1))
        _optional(draw, run_policy, "ttlSecondsAfterFinished", int_at_edges(0))
        _optional(draw, run_policy, "backoffLimit", st.sampled_from([0, 100]))
        spec["runPolicy"] = run_policy
    obj: dict[str, Any] = {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": draw(st.one_of(odd_names(), _JOB_NAMES, _JOB_NAMES)),
            "namespace": "ns",
            "uid": "uid-1",
            "generation": draw(st.sampled_from([1, INT64_MAX])),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }
    if draw(st.booleans()):
        obj["status"] = draw(extreme_statuses())
    return obj


@st.composite
def extreme_statuses(draw: st.DrawFn) -> dict[str, Any]:
    """A status as a user with access to the status subresource may write it: any value the schema admits."""
    status: dict[str, Any] = {}
    _optional(draw, status, "phase", st.sampled_from(["Queued", "Deferred", "Placing", "Running", "Succeeded"]))
    for field in ("queuedTime", "startTime", "completionTime", "chunkEnd"):
        _optional(draw, status, field, rfc3339_times())
    for field in ("gangGeneration", "restarts", "interruptions", "savedOnNotice", "replicas", "gpus"):
        _optional(draw, status, field, int_at_edges(0))
    for field in ("chunkWorkDoneSeconds", "lostWorkSeconds", "estimatedEmissionsGrams"):
        _optional(draw, status, field, st.sampled_from([0.0, 1.5, 1e18, 1.7e308, -1.0]))
    if draw(st.booleans()):
        status["placement"] = {"nodes": draw(st.lists(st.sampled_from(["n1", "n2", "gone"]), max_size=3))}
    if draw(st.booleans()):
        status["lastCheckpoint"] = {"step": draw(int_at_edges(0)), "time": draw(rfc3339_times())}
    return status
