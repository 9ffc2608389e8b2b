"""`aisched`'s manners: a version, defaults in --help, and one line naming what to fix for every
configuration or connection error, caught before the operator starts anything.

The CLI's `main` is called in-process; the operator and the API server are doubles that fail the
test if reached, so nothing here opens a socket.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import urllib3
from kubernetes import client as kubernetes_client
from kubernetes.config import kube_config

import aisched
import aisched.controller.main
from aisched.cli import main
from aisched.settings import Settings

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://api.example.test:6443"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
users: [{name: u, user: {token: abc}}]
"""


def _must_not_be_called(*_: object, **__: object) -> Any:
    raise AssertionError("must not be called")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No AISCHED_* variable, no cluster around, no kubeconfig; the operator must not be started."""
    for name in list(os.environ):
        if name.upper().startswith("AISCHED_") or name in ("POD_NAMESPACE", "KUBERNETES_SERVICE_HOST"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    _point_kubeconfig_at(monkeypatch, tmp_path / "missing")
    monkeypatch.setattr(aisched.controller.main, "run_operator", _must_not_be_called)
    monkeypatch.setattr(kubernetes_client.VersionApi, "get_code", _must_not_be_called)
    return monkeypatch


def _point_kubeconfig_at(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    # The kubernetes client reads KUBECONFIG once, when it is imported; a process is started with it set.
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))


def _error_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"aisched {aisched.__version__}\n"


def test_a_bad_variable_is_one_line_naming_it(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environment.setenv("AISCHED_RESYNC_SECONDS", "-1")
    assert _error_lines(capsys, ["run"]) == ['aisched run: AISCHED_RESYNC_SECONDS: must be greater than 0 (got "-1")']


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "AISCHED_LOG_LEVEL",
            "LOUD",
            "AISCHED_LOG_LEVEL: must be 'DEBUG', 'INFO', 'WARNING' or 'ERROR' (got \"LOUD\")",
        ),
        ("AISCHED_CARBON_TIMEOUT_SECONDS", "0", 'AISCHED_CARBON_TIMEOUT_SECONDS: must be greater than 0 (got "0")'),
        ("AISCHED_CARBON__TIMEOUT_SECONDS", "0", 'AISCHED_CARBON__TIMEOUT_SECONDS: must be greater than 0 (got "0")'),
        ("AISCHED_NAMESPACES", '["ml", " "]', 'AISCHED_NAMESPACES: must not contain blank names (got ["ml", " "])'),
        (
            "AISCHED_CARBON_GPU_POWER_WATTS",
            '{"NVIDIA-H100": "hot"}',
            'AISCHED_CARBON_GPU_POWER_WATTS["NVIDIA-H100"]: must be a valid number',
        ),
        ("AISCHED_NAMESPACES", "ml,research", "AISCHED_NAMESPACES: must be JSON"),
        (
            "AISCHED_RESYNC_SECONDS",
            "600",
            "AISCHED_LIVENESS_PASS_SECONDS (300.0) must exceed AISCHED_RESYNC_SECONDS (600.0)",
        ),
    ],
)
def test_each_kind_of_settings_error_names_the_variable(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, expected: str
) -> None:
    environment.setenv(variable, value)
    [line] = _error_lines(capsys, ["run"])
    assert line.startswith(f"aisched run: {expected}")


def _lower_bound(field: Any) -> tuple[float, bool] | None:
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Gt) and isinstance(rule.gt, int | float):
            return float(rule.gt), False
        if isinstance(rule, annotated_types.Ge) and isinstance(rule.ge, int | float):
            return float(rule.ge), True
    return None


BOUNDED = sorted(name for name, field in Settings.model_fields.items() if _lower_bound(field) is not None)


@pytest.mark.parametrize("name", BOUNDED)
def test_every_bounded_setting_below_its_bound_names_its_variable(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    bound = _lower_bound(Settings.model_fields[name])
    assert bound is not None
    value, inclusive = bound
    below = str(int(value) - 1 if inclusive else int(value))
    environment.setenv(f"AISCHED_{name.upper()}", below)
    [line] = _error_lines(capsys, ["run"])
    assert line.startswith(f"aisched run: AISCHED_{name.upper()}: must be greater than")
    assert line.endswith(f'(got "{below}")')


def test_no_kubeconfig_is_one_line(environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _error_lines(capsys, ["run"]) == ["aisched run: no kubeconfig found: set KUBECONFIG or run inside a cluster"]


def test_a_broken_kubeconfig_is_named(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config"
    path.write_text("clusters: [\n")
    _point_kubeconfig_at(environment, path)
    [line] = _error_lines(capsys, ["run"])
    assert line.startswith(f"aisched run: kubeconfig {path}: not valid YAML")


def _kubeconfig(environment: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    _point_kubeconfig_at(environment, path)
    return path


def test_an_unreachable_api_server_is_one_line(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _kubeconfig(environment, tmp_path)
    refused = urllib3.exceptions.NewConnectionError(
        None,  # type: ignore[arg-type]
        "HTTPSConnection(host='api.example.test', port=6443): Failed to establish a new connection: "
        "[Errno 111] Connection refused",
    )

    def down(*_: object, **__: object) -> None:
        raise urllib3.exceptions.MaxRetryError(None, "/version/", refused)  # type: ignore[arg-type]

    environment.setattr(kubernetes_client.VersionApi, "get_code", down)
    assert _error_lines(capsys, ["run"]) == [
        "aisched run: cannot reach the Kubernetes API server at https://api.example.test:6443 "
        f"([Errno 111] Connection refused): check that the cluster is up and that {path} names it"
    ]


def test_refused_credentials_are_one_line(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _kubeconfig(environment, tmp_path)

    def unauthorized(*_: object, **__: object) -> None:
        raise kubernetes_client.ApiException(status=401, reason="Unauthorized")

    environment.setattr(kubernetes_client.VersionApi, "get_code", unauthorized)
    assert _error_lines(capsys, ["run"]) == [
        f"aisched run: the Kubernetes API server at https://api.example.test:6443 refused the credentials of {path} "
        "(401 Unauthorized): log in again or pick another context"
    ]


def test_the_operator_starts_with_the_settings_once_the_cluster_answers(
    environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _kubeconfig(environment, tmp_path)
    environment.setenv("AISCHED_RESYNC_SECONDS", "5")
    environment.setattr(kubernetes_client.VersionApi, "get_code", lambda *_, **__: None)
    started: list[tuple[Settings, bool]] = []

    def run_operator(settings: Settings, *, standalone: bool = False) -> int:
        started.append((settings, standalone))
        return 0

    environment.setattr(aisched.controller.main, "run_operator", run_operator)
    assert main(["run", "--standalone"]) == 0
    [(settings, standalone)] = started
    assert (settings.resync_seconds, standalone) == (5.0, True)


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "trace", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--nodes NODES (default: 64)" in text
    assert "--load LOAD offered load for traces without arrival times (default: 0.9)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--skip", "-3", "must not be negative"),
        ("--nodes", "0", "must be a number above zero"),  # a count, an interval: zero divides minutes in
        ("--load", "nan", "must be a number above zero"),
        ("--seed", "x", "int"),
    ],
)
def test_bad_option_values_are_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, value: str, reason: str
) -> None:
    # The trace does not exist: had parsing let the value through, the command would fail on the file instead.
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "trace", str(tmp_path / "no-trace.csv"), option, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and reason in err


def test_a_zero_scrape_interval_is_refused_before_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "autoscale", "--scrape", "0"])
    assert exit_.value.code == 2
    assert "argument --scrape: must be a number above zero (got '0')" in capsys.readouterr().err
