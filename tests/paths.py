"""Where the committed artefacts that several tiers check live."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "helm" / "aisched"
DASHBOARDS = CHART / "dashboards"
RULES_FILE = REPO_ROOT / "manifests" / "prometheus-rules.yaml"
INSTALL_MANIFEST = REPO_ROOT / "manifests" / "install.yaml"
