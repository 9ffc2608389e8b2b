"""The CSV/ConfigMap file source, on files written by the tests."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aisched.sources.carbon import CarbonSourceDataError, CarbonSourceError, FileSource, read_intensity_csv

NOW = datetime(2019, 12, 20, 0, 40, tzinfo=UTC)
GB_CI = "Time,Carbon Intensity\n2019-12-20 00:00:00,120.9\n2019-12-20 00:30:00,135.0\n2019-12-20 01:00:00,141.3\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_reads_the_lets_wait_awhile_format(tmp_path: Path) -> None:
    source = FileSource(write(tmp_path / "gb.csv", GB_CI), clock=lambda: NOW)
    fc = asyncio.run(source.forecast("GB", NOW, NOW + timedelta(minutes=30)))
    assert (fc.start, fc.step, fc.values) == (
        datetime(2019, 12, 20, 0, 30, tzinfo=UTC),
        timedelta(minutes=30),
        (135.0, 141.3),
    )
    assert asyncio.run(source.current("GB")).grams_per_kwh == 135.0


def test_finds_columns_by_name_and_reads_zoned_times(tmp_path: Path) -> None:
    text = "intensity_g_per_kwh,time\n100,2019-12-20T01:00:00+01:00\n50,2019-12-20T00:30:00Z\n"
    source = FileSource(write(tmp_path / "x.csv", text))
    fc = asyncio.run(source.forecast("GB", datetime(2019, 12, 20, tzinfo=UTC), datetime(2019, 12, 20, 1, tzinfo=UTC)))
    assert fc.values == (100.0, 50.0)


def test_a_region_picks_its_own_file(tmp_path: Path) -> None:
    write(tmp_path / "DE.csv", "time,intensity\n2019-12-20 00:00:00,400\n2019-12-20 01:00:00,300\n")
    source = FileSource(tmp_path / "{region}.csv", clock=lambda: NOW)
    assert asyncio.run(source.current("DE")).grams_per_kwh == 400.0


def test_a_region_that_is_a_path_reads_no_file(tmp_path: Path) -> None:
    (tmp_path / "forecasts").mkdir()
    write(tmp_path / "secret.csv", "time,intensity\n2019-12-20 00:00:00,1\n")
    source = FileSource(tmp_path / "forecasts" / "{region}.csv", clock=lambda: NOW)
    for region in ("../secret", "..", "/etc/x", "a\\b"):
        with pytest.raises(CarbonSourceDataError, match="a region is not a path"):
            asyncio.run(source.current(region))


def test_an_updated_file_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path / "gb.csv", GB_CI)
    source = FileSource(path, clock=lambda: NOW)
    assert asyncio.run(source.current("GB")).grams_per_kwh == 135.0
    write(path, GB_CI.replace("135.0", "35.0"))
    os.utime(path, ns=(1, 2))  # a ConfigMap update changes the file under the same name
    assert asyncio.run(source.current("GB")).grams_per_kwh == 35.0


def test_garbage_rows_name_the_line(tmp_path: Path) -> None:
    source = FileSource(write(tmp_path / "gb.csv", GB_CI + "yesterday,lots\n"))
    with pytest.raises(CarbonSourceDataError, match="line 5"):
        asyncio.run(source.current("GB"))


def test_binary_garbage_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "gb.csv"
    path.write_bytes(b"\xff\xfe\x00garbage\x00\x81")
    with pytest.raises(CarbonSourceDataError):
        asyncio.run(FileSource(path).current("GB"))


def test_times_outside_the_file_are_a_data_error(tmp_path: Path) -> None:
    source = FileSource(write(tmp_path / "gb.csv", GB_CI), clock=lambda: NOW + timedelta(days=1))
    with pytest.raises(CarbonSourceDataError, match="outside the forecast"):
        asyncio.run(source.current("GB"))
    with pytest.raises(CarbonSourceDataError, match="has nothing in"):
        asyncio.run(source.forecast("GB", NOW + timedelta(days=1), NOW + timedelta(days=2)))


def test_a_missing_file_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(CarbonSourceError, match="No such file"):
        asyncio.run(FileSource(tmp_path / "absent.csv").current("GB"))


def test_mixed_resolution_keeps_every_reading_or_thins_to_a_given_step(tmp_path: Path) -> None:
    text = GB_CI + "2019-12-20 01:15:00,100.0\n2019-12-20 01:30:00,90.0\n2019-12-20 01:45:00,80.0\n"
    path = write(tmp_path / "gb.csv", text)
    fine = read_intensity_csv(path, "GB")
    assert fine.step == timedelta(minutes=15)
    assert fine.values == (120.9, 120.9, 135.0, 135.0, 141.3, 100.0, 90.0, 80.0)
    coarse = read_intensity_csv(path, "GB", step=timedelta(minutes=30))
    assert coarse.values == (120.9, 135.0, 141.3, 90.0)
