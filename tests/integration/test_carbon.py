"""Carbon-aware deferral on the local cluster, with a file-based forecast (one file per region)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import a_training_job
from tests.integration.cluster import LocalCluster, wait_for
from tests.integration.operator import OperatorProcess, get_object

CLEAN_AFTER = timedelta(minutes=3)  # when the forecast turns clean, after the minute of the operator's restart


@pytest.fixture(scope="module")
def carbon_operator(
    operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, datetime]]:
    """The session operator restarted with a file forecast for region GB: 400 g/kWh, then 40 from `clean`."""
    directory = tmp_path_factory.mktemp("carbon")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    clean = now + CLEAN_AFTER  # on the file's one-minute grid
    rows = ["time,intensity"]
    for minute in range(-5, 24 * 60):
        moment = now + timedelta(minutes=minute)
        rows.append(f"{moment.isoformat()},{40 if moment >= clean else 400}")
    Path(directory / "GB.csv").write_text("\n".join(rows) + "\n")
    saved = dict(operator.extra_env)
    operator.stop()
    operator.extra_env.update(
        {
            "AISCHED_CARBON__PROVIDER": "file",
            "AISCHED_CARBON__FILE_PATH": str(directory / "{region}.csv"),
            "AISCHED_CARBON__REGION": "GB",
        }
    )
    operator.start()
    try:
        yield operator, clean
    finally:
        operator.stop()
        operator.extra_env.clear()
        operator.extra_env.update(saved)
        operator.start()


def _deferrable(name: str, region: str = "GB") -> dict[str, Any]:
    return (
        a_training_job(name)
        .set("expectedDurationSeconds", 600)
        .set("carbon", {"deferrable": True, "maxDelaySeconds": 3600, "region": region})
        .obj()
    )


def _apply(cluster: LocalCluster, namespace: str, obj: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    assert result.returncode == 0, result.stderr


def _status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = get_object(cluster, "trainingjob", name, namespace).get("status", {})
    return status


def test_start_now_annotation_starts_a_deferred_job(
    cluster: LocalCluster, namespace: str, carbon_operator: tuple[OperatorProcess, datetime]
) -> None:
    _, clean = carbon_operator
    if clean - datetime.now(UTC) < timedelta(seconds=20):
        pytest.skip("the clean minute has come already: nothing left to force")
    _apply(cluster, namespace, _deferrable("impatient"))
    wait_for(lambda: _status(cluster, namespace, "impatient").get("phase") == "Deferred", 60, "deferral")
    cluster.kubectl("annotate", "tj", "impatient", "-n", namespace, "aisched.io/start-now=true")
    wait_for(lambda: _status(cluster, namespace, "impatient").get("phase") == "Running", 30, "a forced start")


def test_a_job_starts_in_time_when_the_forecast_source_is_down(
    cluster: LocalCluster, namespace: str, carbon_operator: tuple[OperatorProcess, datetime]
) -> None:
    # No forecast file for this region: the source fails, and the job must not wait past its latest start.
    _apply(cluster, namespace, _deferrable("unforecast", region="NOWHERE"))
    wait_for(
        lambda: _status(cluster, namespace, "unforecast").get("phase") == "Running", 60, "a start without forecast"
    )


def test_a_deferrable_job_waits_for_the_clean_hour_then_runs(
    cluster: LocalCluster, namespace: str, carbon_operator: tuple[OperatorProcess, datetime]
) -> None:
    _, clean = carbon_operator
    _apply(cluster, namespace, _deferrable("patient"))
    status = wait_for(
        lambda: (s := _status(cluster, namespace, "patient")).get("phase") == "Deferred" and s, 60, "deferral"
    )
    until = datetime.fromisoformat(status["deferral"]["until"])
    assert until == clean
    # The saving depends on how much dirty time is left when the job arrives; it is never negative.
    assert status["deferral"]["expectedSavingPercent"] > 0
    assert status["deferral"]["forecastGramsPerKWh"] == 40
    assert _status(cluster, namespace, "patient").get("phase") == "Deferred"  # still waiting, no pods
    wait_for(
        lambda: _status(cluster, namespace, "patient").get("phase") == "Running",
        (until - datetime.now(UTC)).total_seconds() + 45,
        "the job to start at the planned minute",
    )
    started = datetime.fromisoformat(_status(cluster, namespace, "patient")["startTime"])
    assert started >= until
    # Running: its emissions are estimated every minute from GPU power and the intensity seen (40 g/kWh).
    grams = wait_for(
        lambda: _status(cluster, namespace, "patient").get("estimatedEmissionsGrams"), 100, "an emissions estimate"
    )
    assert 0 < grams < 1.0  # one 400 W GPU for about a minute at 40 g/kWh: about 0.27 g
