"""The real tools the tools tier drives: promtool (Debian's prometheus package)
and helm (built by hack/build-k8s-binaries.sh). A test skips, saying how to get the
tool, only when the tool is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from aisched.testing.versions import pinned_version
from tests.paths import CHART


def _cache_bin() -> Path:
    cache = os.environ.get("AISCHED_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aisched"
    )
    return Path(cache) / "bin"


def helm_binary() -> str:
    helm = _cache_bin() / "helm"
    if helm.is_file():
        return str(helm)
    found = shutil.which("helm")
    if found is None:
        pytest.skip(f"helm is not built: run 'make k8s-binaries' (it lands in {helm})")
    return found


def promtool_binary() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed: apt-get install -y prometheus (Debian's package ships it)")
    return found


def promtool(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool_binary(), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=300, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def kubernetes_version() -> str:
    """The version the project builds and tests on (hack/versions.env); helm template assumes an old one."""
    return pinned_version("KUBERNETES_VERSION")


def template(
    *set_values: str, namespace: str = "aisched-system", show_only: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`helm template` the chart with `--set` overrides."""
    args = ["template", "aisched", str(CHART), "--namespace", namespace, "--kube-version", kubernetes_version()]
    for item in set_values:
        args += ["--set", item]
    if show_only:
        args += ["--show-only", show_only]
    return helm(*args, check=check)


def render(*set_values: str, namespace: str = "aisched-system", show_only: str | None = None) -> list[dict[str, Any]]:
    """The objects `helm template` renders, empty documents dropped."""
    output = template(*set_values, namespace=namespace, show_only=show_only).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]
