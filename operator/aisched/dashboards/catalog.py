"""Every dashboard by file name, and the JSON the chart ships for each."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from aisched.dashboards.carbon import carbon
from aisched.dashboards.grafana import Dashboard
from aisched.dashboards.inference import inference
from aisched.dashboards.operator import operator
from aisched.dashboards.scheduling import cluster, jobs, queues
from aisched.dashboards.spot import spot

DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "cluster": cluster,
    "queues": queues,
    "jobs": jobs,
    "spot": spot,
    "carbon": carbon,
    "inference": inference,
    "operator": operator,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name]().to_json(), indent=2, sort_keys=True) + "\n"


def write_dashboards(output_dir: Path) -> list[Path]:
    """One `<name>.json` per dashboard in OUTPUT_DIR (created if missing); the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        path = output_dir / f"{name}.json"
        path.write_text(render(name))
        written.append(path)
    return written
