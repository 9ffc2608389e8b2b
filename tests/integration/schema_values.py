"""Hypothesis strategies for objects of our CRDs, read off the generated OpenAPI schemas.

hypothesis-jsonschema would be the library for this, but its last release (0.23.1) fails
on the Hypothesis this project uses (`'many' object has no attribute 'more'`), and it
knows neither Kubernetes' structural-schema extensions nor CEL. This covers the subset
the CRDs use (object, array, string with enum/pattern/format/length, integer and number
with bounds, boolean, maps) in two moods: `admitted` keeps to what the schema admits and
leans on its edges (every bound, the longest string, hostile pod templates in place of a
pod spec's); `hostile` also goes one past each bound, to int64's
limits, to empty and overlong strings and values of the wrong type.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# What a tenant might put in a pod template to defeat placement or take more than declared.
HOSTILE_POD_SPECS: list[dict[str, Any]] = [
    {"nodeName": "n1"},
    {"schedulingGates": [{"name": "x"}]},
    {"hostNetwork": True, "hostPID": True},
    {"tolerations": [{"operator": "Exists"}]},
    {"priorityClassName": "system-node-critical"},
    {"initContainers": [{"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "64"}}}]},
    {"nodeSelector": {"kubernetes.io/hostname": "elsewhere"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}},
    {"restartPolicy": "Always", "terminationGracePeriodSeconds": INT64_MAX},
    {"securityContext": {"runAsUser": 0}, "hostIPC": True},
    {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
    {"containers": []},
]
ODD_CONTAINERS: list[dict[str, Any]] = [
    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1000"}}},
    {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "0.5"}}},
    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "-1"}}},
    {"name": "c", "image": "x", "securityContext": {"privileged": True}},
    {"name": "c" * 64, "image": ""},
    {"name": "c", "image": "x", "env": [{"name": "AISCHED_RANK", "value": "7"}] * 50},
]
WRONG_TYPES: st.SearchStrategy[Any] = st.sampled_from([None, "", "x", -1, 1.5, True, [], {}])


@dataclass(frozen=True)
class SchemaValues:
    """Strategies for values of one schema; HOSTILE also makes what the schema refuses."""

    hostile: bool

    def of(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        made = self._admitted(schema)
        return st.one_of(made, WRONG_TYPES) if self.hostile else made

    def _admitted(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        kind = schema.get("type")
        if "enum" in schema:
            return st.sampled_from([*schema["enum"], *(["", "Bogus"] if self.hostile else [])])
        makers = {
            "object": lambda: self._object(schema),
            "array": lambda: self._array(schema),
            "integer": lambda: self._integers(schema),
            "number": lambda: self._numbers(schema),
            "string": lambda: self._strings(schema),
            "boolean": st.booleans,
        }
        maker = makers.get(str(kind))
        return maker() if maker is not None else WRONG_TYPES

    def _array(self, schema: dict[str, Any]) -> st.SearchStrategy[list[Any]]:
        most = min(schema.get("maxItems", 4), 4)
        return st.lists(self.of(schema.get("items", {})), min_size=schema.get("minItems", 0), max_size=most)

    def _integers(self, schema: dict[str, Any]) -> st.SearchStrategy[int]:
        low, high = schema.get("minimum", INT64_MIN), schema.get("maximum", INT64_MAX)
        edges = {low, high}
        if self.hostile:
            edges |= {max(low - 1, INT64_MIN), min(high + 1, INT64_MAX), 0, -1, INT64_MIN, INT64_MAX}
        return st.one_of(st.sampled_from(sorted(edges)), st.integers(low, high))

    def _numbers(self, schema: dict[str, Any]) -> st.SearchStrategy[float]:
        low, high = schema.get("minimum", -1e9), schema.get("maximum", 1e9)
        exclusive = schema.get("exclusiveMinimum") is True
        edges = [high] + ([] if exclusive else [low])
        if self.hostile:
            edges += [low, low - 1, high + 1, float(INT64_MAX)]
        return st.one_of(st.sampled_from(edges), st.floats(low, high, allow_nan=False, exclude_min=exclusive))

    def _strings(self, schema: dict[str, Any]) -> st.SearchStrategy[str]:
        longest = schema.get("maxLength", 300)
        if schema.get("format") == "date-time":
            good = st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
            return st.one_of(good, st.sampled_from(["yesterday", "2026-13-01T00:00:00Z"])) if self.hostile else good
        if "pattern" in schema:
            made = st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= longest)
        else:
            made = st.one_of(st.text(string.printable, max_size=min(longest, 40)), st.just("a" * longest))
        odd = st.sampled_from(["", " ", "a" * (longest + 1), "ünïcødé", "x\n{}\"'", "../.."])
        return st.one_of(made, odd) if self.hostile else made

    def _object(self, schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        if not properties and isinstance(schema.get("additionalProperties"), dict):
            keys = st.sampled_from(["a", "team", "example.com/x", *(["", "x" * 64] if self.hostile else [])])
            return st.dictionaries(keys, self.of(schema["additionalProperties"]), max_size=3)
        fields = {name: self.of(sub) for name, sub in properties.items()}
        made = st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required},
        )
        if "containers" in properties and "initContainers" in properties:  # a pod spec
            return _pod_spec(made)
        return made


def _pod_spec(declared: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A pod spec as the schema makes it, plain, or with something hostile added."""
    plain = st.just({"containers": [{"name": "trainer", "image": "trainer:1"}]})
    hostile = st.sampled_from(HOSTILE_POD_SPECS).map(
        lambda extra: {"containers": [{"name": "t", "image": "t"}], **extra}
    )
    odd_container = st.sampled_from(ODD_CONTAINERS).map(lambda c: {"containers": [c]})
    return st.one_of(plain, hostile, odd_container, declared)


def names(longest: int, *, hostile: bool) -> st.SearchStrategy[str]:
    """Object names: valid DNS-1123 labels up to LONGEST; HOSTILE: past it and ones refused."""
    valid = st.from_regex(rf"[a-z]([-a-z0-9]{{0,{longest - 2}}}[a-z0-9])?", fullmatch=True)
    if not hostile:
        return st.one_of(valid, st.just("a" * longest))
    return st.sampled_from(["a" * (longest + 1), "a" * 64, "a-" * 20 + "-", "9lives", "x.y", "UPPER"])
