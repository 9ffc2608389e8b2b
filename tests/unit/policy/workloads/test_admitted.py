"""The operator's record of an admission is read back only when every field is one it writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from aisched.policy.workloads.metadata import read_admitted
from aisched.policy.workloads.model import AdmittedRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_record_reads_back_as_it_was_written() -> None:
    for record in (
        AdmittedRecord(("n1", "n1", "n2"), 8, None, "team-a", T0, generation=3),
        AdmittedRecord(("n1",), 0, "1g.10gb", "team-a", T0),
        AdmittedRecord((), 0, None, "team-a", T0),
    ):
        assert read_admitted(json.dumps(record.to_json())) == record


def test_admitted_at_with_z_is_utc_and_generation_defaults_to_one() -> None:
    text = '{"nodes": ["n1"], "gpusPerPod": 1, "queue": "q", "admittedAt": "2026-01-01T00:00:00Z"}'
    assert read_admitted(text) == AdmittedRecord(("n1",), 1, None, "q", T0, generation=1)


GOOD: dict[str, Any] = {"nodes": ["n1"], "gpusPerPod": 1, "queue": "q", "admittedAt": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    "change",
    [
        {"nodes": "n1"},
        {"nodes": [""]},
        {"nodes": [1]},
        {"nodes": ["n" * 254]},
        {"nodes": ["n"] * 100_001},
        {"gpusPerPod": -1},
        {"gpusPerPod": True},
        {"gpusPerPod": 1.0},
        {"gpusPerPod": None},
        {"queue": ""},
        {"queue": 3},
        {"admittedAt": "soon"},
        {"admittedAt": None},
        {"generation": 0},
        {"generation": "2"},
        {"migProfile": 7},
        {"migProfile": ""},
    ],
)
def test_a_field_it_does_not_write_is_no_record(change: dict[str, Any]) -> None:
    assert read_admitted(json.dumps(GOOD)) is not None
    assert read_admitted(json.dumps(GOOD | change)) is None


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '"n1"', "[" * 100_000, "1e999"])
def test_text_that_is_no_json_object_is_no_record(text: str) -> None:
    assert read_admitted(text) is None
