"""The alerting and recording rules: the plain rules file is the chart's PrometheusRule,
promtool checks it, and promtool unit tests (alerts.test.yaml) make every alert fire
when it should and stay quiet when it should not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.metrics_catalog import known_series, metric_names_in
from tests.paths import RULES_FILE
from tests.tools.binaries import by_kind, promtool, render

HERE = Path(__file__).parent
ALERT_TESTS = HERE / "alerts.test.yaml"
REQUIRED_ALERTS = {
    "AischedDown",
    "AischedJobQueuedTooLong",
    "AischedInterruptionRateHigh",
    "AischedLostWorkHigh",
    "AischedDeadlineAtRisk",
}


def rules(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in groups["groups"] for rule in group["rules"]]


def rules_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES_FILE.read_text())
    return loaded


def chart_rules(*set_values: str) -> dict[str, Any]:
    (rule,) = by_kind(
        render("prometheusRule.enabled=true", *set_values, show_only="templates/monitoring/prometheusrule.yaml"),
        "PrometheusRule",
    )
    spec: dict[str, Any] = rule["spec"]
    return spec


def test_the_rules_file_is_the_charts_prometheus_rule() -> None:
    assert rules_file() == chart_rules(), "run `make generate`: manifests/prometheus-rules.yaml is stale"


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_an_operator_must_know_about_exist() -> None:
    alerts = {rule["alert"] for rule in rules(rules_file()) if "alert" in rule}
    assert alerts >= REQUIRED_ALERTS


def test_every_rule_refers_only_to_known_series() -> None:
    known = known_series()
    for rule in rules(rules_file()):
        unknown = metric_names_in(rule["expr"]) - set(known)
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {sorted(unknown)} is not exported"


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    for rule in rules(rules_file()):
        if "alert" in rule:
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            assert rule["annotations"]["description"], rule["alert"]


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    alerts = {rule["alert"] for rule in rules(rules_file()) if "alert" in rule}
    assert alerts <= fired, f"never seen firing: {sorted(alerts - fired)}"
    assert alerts <= quiet, f"never seen quiet: {sorted(alerts - quiet)}"
    records = {rule["record"] for rule in rules(rules_file()) if "record" in rule}
    tested = {case["expr"] for test in tests for case in test.get("promql_expr_test", [])}
    assert records <= tested, f"recording rules without a test: {sorted(records - tested)}"


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", ALERT_TESTS.name, cwd=HERE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_thresholds_come_from_values() -> None:
    spec = chart_rules(
        "prometheusRule.alerts.queuedTooLongSeconds=7200",
        "prometheusRule.alerts.lostWorkWindow=12h",
        "prometheusRule.jobRegex=my-operator",
    )
    exprs = {rule["alert"]: rule["expr"] for rule in rules(spec) if "alert" in rule}
    assert "> 7200" in exprs["AischedJobQueuedTooLong"]
    assert "[12h]" in exprs["AischedLostWorkHigh"]
    assert 'up{job=~"my-operator"}' in exprs["AischedDown"]


def test_dcgm_attribution_works_without_honor_labels(tmp_path: Path) -> None:
    """Scraped without honorLabels, DCGM's pod labels arrive as exported_namespace/exported_pod."""
    spec = chart_rules(
        "prometheusRule.dcgm.podLabel=exported_pod", "prometheusRule.dcgm.namespaceLabel=exported_namespace"
    )
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    dcgm = 'namespace="gpu-operator", pod="dcgm-exporter-x", exported_namespace="ml", exported_pod="llama-worker-0"'
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"DCGM_FI_DEV_GPU_UTIL{{{dcgm}, gpu='0'}}".replace("'", '"'), "values": "90x10"},
                    {
                        "series": 'aisched_job_pod_info{namespace="ml", pod="llama-worker-0", job_name="llama", '
                        'kind="TrainingJob"}',
                        "values": "1x10",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": "aisched_job:dcgm_gpu_utilization:avg",
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                "labels": 'aisched_job:dcgm_gpu_utilization:avg{namespace="ml", job_name="llama", '
                                'kind="TrainingJob"}',
                                "value": 90,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
