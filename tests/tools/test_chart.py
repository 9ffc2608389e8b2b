"""The Helm chart rendered by the real helm: lint, the objects it makes, least-privilege
RBAC, restricted Pod Security, settings that match the operator's, documented values,
a schema that refuses bad ones, and the plain-kubectl bundle rendered from it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from aisched.api.queue import QueueSpec
from aisched.settings import Settings
from tests.operator_permissions import DEFAULT_PERMISSIONS, PROVISIONING_PERMISSIONS
from tests.paths import CHART, DASHBOARDS, INSTALL_MANIFEST, REPO_ROOT, RULES_FILE
from tests.tools.binaries import by_kind, helm, kubernetes_version, render, template

NAMESPACE = "aisched-system"
VALUES = CHART / "values.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "Queue",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def the(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(objects, kind)
    return found


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (operator,) = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = operator
    return result


@pytest.fixture(scope="module")
def default_render() -> list[dict[str, Any]]:
    return render(namespace=NAMESPACE)


def test_helm_lint_is_clean() -> None:
    result = helm("lint", str(CHART), "--strict", "--kube-version", kubernetes_version())
    assert "0 chart(s) failed" in result.stdout


def test_default_render_makes_the_operator_and_nothing_that_needs_other_crds(
    default_render: list[dict[str, Any]],
) -> None:
    kinds = sorted(obj["kind"] for obj in default_render)
    assert kinds.count("CustomResourceDefinition") == 3
    assert {
        "Deployment",
        "ServiceAccount",
        "Service",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    } <= set(kinds)
    assert "ServiceMonitor" not in kinds
    assert "PrometheusRule" not in kinds
    for obj in default_render:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


def test_crds_are_the_generated_ones(default_render: list[dict[str, Any]]) -> None:
    rendered = {crd["metadata"]["name"]: crd for crd in by_kind(default_render, "CustomResourceDefinition")}
    for path in (CHART / "templates" / "crds").glob("*.yaml"):
        generated = yaml.safe_load(path.read_text())
        assert rendered[generated["metadata"]["name"]] == generated


def test_crds_are_kept_on_uninstall(default_render: list[dict[str, Any]]) -> None:
    """Uninstalling must not delete the CRDs: that would delete every job and service in the cluster."""
    for crd in by_kind(default_render, "CustomResourceDefinition"):
        assert crd["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep", crd["metadata"]["name"]


def test_two_replicas_with_leader_election_in_their_own_namespace(default_render: list[dict[str, Any]]) -> None:
    deployment = the(default_render, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"]: e for e in container(default_render)["env"]}
    assert env["AISCHED_LEADER_ELECTION"]["value"] == "true"
    assert env["AISCHED_LEADER_LEASE_NAME"]["value"] == "aisched-leader"
    assert env["AISCHED_LEADER_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert the(default_render, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_one_replica_needs_no_disruption_budget() -> None:
    assert not by_kind(render("replicaCount=1"), "PodDisruptionBudget")


def test_several_replicas_without_leader_election_are_refused() -> None:
    result = template("leaderElection.enabled=false", check=False)
    assert result.returncode != 0
    assert "needs leaderElection.enabled=true" in result.stderr


def test_pod_meets_the_restricted_pod_security_standard(default_render: list[dict[str, Any]]) -> None:
    pod = the(default_render, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    assert all("hostPath" not in volume for volume in pod["volumes"])
    security = container(default_render)["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_probes_use_kopfs_health_endpoint_and_metrics_are_served(default_render: list[dict[str, Any]]) -> None:
    operator = container(default_render)
    ports = {port["name"]: port["containerPort"] for port in operator["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    service = the(default_render, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    pod_labels = the(default_render, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_a_network_policy_admits_only_scrapes_and_probes(default_render: list[dict[str, Any]]) -> None:
    policy = the(default_render, "NetworkPolicy")["spec"]
    pod_labels = the(default_render, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert policy["policyTypes"] == ["Ingress"]
    ports = [rule["ports"] for rule in policy["ingress"]]
    assert ports == [[{"port": "metrics", "protocol": "TCP"}], [{"port": "health", "protocol": "TCP"}]]
    # Named ports: whatever numbers the values give them, the policy follows the container's.
    assert {p["name"] for p in container(default_render)["ports"]} == {"metrics", "health"}


def test_the_network_policy_takes_its_scrapers_and_egress_from_values() -> None:
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    api_server = {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}
    values = {"networkPolicy": {"metricsFrom": [monitoring], "egress": [api_server]}}
    args = ["template", "aisched", str(CHART), "--namespace", NAMESPACE, "--kube-version", kubernetes_version()]
    output = helm(*args, "--set-json", f"networkPolicy={json.dumps(values['networkPolicy'])}").stdout
    policy = the([doc for doc in yaml.safe_load_all(output) if doc], "NetworkPolicy")["spec"]
    assert policy["ingress"][0]["from"] == [monitoring]
    assert "from" not in policy["ingress"][1]  # the kubelet's probes come from the node
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    dns, *rest = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert rest == [api_server]
    assert not by_kind(render("networkPolicy.enabled=false"), "NetworkPolicy")


def test_image_defaults_to_the_app_version_and_a_digest_pins_it() -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container(render())["image"] == f"ghcr.io/aisched/aisched:{app_version}"
    digest = "sha256:" + "a" * 64
    assert container(render(f"image.digest={digest}"))["image"] == f"ghcr.io/aisched/aisched@{digest}"


def _settings_env_names() -> set[str]:
    """Every variable Settings reads: AISCHED_<FIELD>, AISCHED_<GROUP>__<FIELD>, and aliases."""
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names |= {choice.upper() for choice in getattr(alias, "choices", [])} if alias else {f"AISCHED_{name.upper()}"}
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names |= {f"AISCHED_{name.upper()}__{sub.upper()}" for sub in field.annotation.model_fields}
    return names


def _settings_from(env: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for variable in env:
        value = variable.get("value")
        if value is None:  # the downward API: the pod's namespace
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            value = NAMESPACE
        monkeypatch.setenv(variable["name"], value)
    return Settings()


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _settings_env_names() | {"POD_NAMESPACE"}:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_variable_the_chart_sets_is_a_setting(default_render: list[dict[str, Any]]) -> None:
    set_by_chart = {variable["name"] for variable in container(default_render)["env"]}
    assert set_by_chart <= _settings_env_names()


def test_chart_defaults_are_the_operators_defaults(
    default_render: list[dict[str, Any]], clean_environment: pytest.MonkeyPatch
) -> None:
    clean_environment.setenv("AISCHED_LEADER_NAMESPACE", NAMESPACE)  # what the downward API gives
    operator_defaults = Settings()
    assert _settings_from(container(default_render)["env"], clean_environment) == operator_defaults


def test_values_reach_the_operator_as_settings(clean_environment: pytest.MonkeyPatch) -> None:
    objects = render(
        "settings.namespaces={ml,research}",
        "settings.topology.preset=gke",
        "settings.logLevel=DEBUG",
        "carbon.provider=watttime",
        "carbon.region=CAISO_NORTH",
        "leaderElection.leaseDurationSeconds=30",
        "leaderElection.renewDeadlineSeconds=20",
        "leaderElection.retryPeriodSeconds=4",
        "settings.eventsPerSecond=3",
        "settings.apiRequestTimeoutSeconds=12",
        "settings.apiQPS=7",
        "settings.apiBurst=9",
        "settings.livenessPassSeconds=90",
        "metrics.address=127.0.0.1",
        "health.address=10.0.0.1",
    )
    settings = _settings_from(container(objects)["env"], clean_environment)
    assert settings.namespaces == ["ml", "research"]
    assert (settings.leader_lease_seconds, settings.leader_renew_deadline_seconds) == (30, 20)
    assert (settings.leader_retry_seconds, settings.events_per_second) == (4.0, 3.0)
    assert settings.topology.resolved().node_label(settings.topology.resolved().level("Block")) == (
        "cloud.google.com/gce-topology-block"
    )
    assert settings.log_level == "DEBUG"
    assert (settings.api_request_timeout_seconds, settings.api_qps, settings.api_burst) == (12.0, 7.0, 9)
    assert settings.liveness_pass_seconds == 90.0
    assert (settings.metrics_address, settings.health_address) == ("127.0.0.1", "10.0.0.1")
    assert (settings.carbon.provider, settings.carbon.region) == ("watttime", "CAISO_NORTH")


def test_leader_timings_out_of_order_are_refused(clean_environment: pytest.MonkeyPatch) -> None:
    # A renew deadline past the lease would let a leader act after a standby took over.
    clean_environment.setenv("AISCHED_LEADER_RENEW_DEADLINE_SECONDS", "20")
    with pytest.raises(ValueError, match="AISCHED_LEADER_RETRY_SECONDS < AISCHED_LEADER_RENEW_DEADLINE_SECONDS"):
        Settings()


def test_the_carbon_api_key_is_a_mounted_file_not_an_api_permission(clean_environment: pytest.MonkeyPatch) -> None:
    objects = render("carbon.provider=electricitymaps", "carbon.apiKeySecret.name=grid-token")
    pod = the(objects, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "grid-token"
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == volume["name"]]
    settings = _settings_from(container(objects)["env"], clean_environment)
    assert settings.carbon.api_key_file == Path(mount["mountPath"]) / "api-key"
    assert mount["readOnly"] is True


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def _for_users(role: dict[str, Any]) -> bool:
    return any(label.startswith(AGGREGATE) for label in role["metadata"].get("labels", {}))


def _rules(objects: list[dict[str, Any]], *, users: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The rules of the operator's roles, or (users) of the roles aggregated into view, edit and admin."""
    roles = [obj for obj in objects if obj["kind"] in {"Role", "ClusterRole"} and _for_users(obj) == users]
    return [(role["kind"], rule) for role in roles for rule in role["rules"]]


def _user_grants(objects: list[dict[str, Any]], aggregated_into: str) -> set[tuple[str, str]]:
    return {
        (resource, verb)
        for role in by_kind(objects, "ClusterRole")
        if role["metadata"].get("labels", {}).get(AGGREGATE + aggregated_into) == "true"
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_grants_exactly_the_listed_permissions(default_render: list[dict[str, Any]]) -> None:
    granted = {
        (group, resource, verb, kind == "Role", name)
        for kind, rule in _rules(default_render)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", [None])
    }
    needed = {
        (p.group, p.resource, verb, p.own_namespace_only, p.resource_name)
        for p in DEFAULT_PERMISSIONS
        for verb in p.verbs
    }
    assert granted == needed


def test_rbac_has_no_wildcards_and_no_secrets(default_render: list[dict[str, Any]]) -> None:
    for _, rule in _rules(default_render) + _rules(default_render, users=True):
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]
        assert "secrets" not in rule["resources"]


def test_users_get_our_kinds_through_view_edit_and_admin(default_render: list[dict[str, Any]]) -> None:
    kinds = {"trainingjobs", "inferenceservices"}
    reads = {"get", "list", "watch"}
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    view = _user_grants(default_render, "view")
    assert {(kind, verb) for kind in kinds for verb in reads} <= view
    assert not {verb for resource, verb in view} & writes, "view grants only reads"
    for role in ("edit", "admin"):
        grants = _user_grants(default_render, role)
        assert {(kind, verb) for kind in kinds for verb in reads | writes} <= grants
        assert ("inferenceservices/scale", "patch") in grants  # kubectl scale, as for a Deployment
    for role in ("view", "edit", "admin"):
        grants = _user_grants(default_render, role)
        # Status is the operator's decision; a Queue is the cluster administrator's quota.
        assert not {resource for resource, _ in grants if resource.endswith("/status")}, role
        assert not {verb for resource, verb in grants if resource == "queues"} - reads, role
    assert all(rule["apiGroups"] == ["aisched.io"] for _, rule in _rules(default_render, users=True))
    assert not _rules(render("rbac.userRoles=false"), users=True)


def test_every_rbac_rule_says_why() -> None:
    for path in (CHART / "templates" / "rbac").glob("*.yaml"):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[index - 1].strip().startswith("#"), f"{path.name}:{index + 1} needs a comment"


def test_monitoring_objects_when_enabled() -> None:
    objects = render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=kps", "prometheusRule.enabled=true")
    monitor = the(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True
    service = the(objects, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert the(objects, "PrometheusRule")["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_dashboards_are_configmaps_for_the_grafana_sidecar(default_render: list[dict[str, Any]]) -> None:
    maps = {name: cm for cm in by_kind(default_render, "ConfigMap") for name in cm["data"]}
    files = {path.name: path.read_text() for path in DASHBOARDS.glob("*.json")}
    assert set(maps) == set(files)
    for name, configmap in maps.items():
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(configmap["data"][name]) == json.loads(files[name])
    assert not by_kind(render("dashboards.enabled=false"), "ConfigMap")


QUEUE_KIND = "aisched.io/v1alpha1/Queue"


def _render_queues(*set_values: str, kind_exists: bool = True) -> subprocess.CompletedProcess[str]:
    """The chart's Queues, as `helm install` renders them once the Queue kind exists (or before)."""
    args = ["template", "aisched", str(CHART), "--namespace", NAMESPACE, "--kube-version", kubernetes_version()]
    args += ["--api-versions", QUEUE_KIND] if kind_exists else []
    for item in set_values:
        args += ["--set", item]
    return helm(*args, "--show-only", "templates/queues/queues.yaml", check=False)


def test_queues_from_values_are_valid_queue_objects() -> None:
    rendered = _render_queues(
        "queues[0].name=research",
        "queues[0].nominalGPUs=64",
        "queues[0].weight=2",
        "queues[0].cohort=lab",
        "queues[0].namespaces={team-a,team-b}",
        "queues[0].maxPriority=100",
        "queues[1].name=prod",
        "queues[1].nominalGPUs=128",
    )
    queues = {q["metadata"]["name"]: q for q in yaml.safe_load_all(rendered.stdout) if q}
    assert set(queues) == {"research", "prod"}
    research = QueueSpec.model_validate(queues["research"]["spec"])
    assert (research.weight, research.namespaces, research.max_priority) == (2, ["team-a", "team-b"], 100)


def test_a_queue_is_never_deleted_to_be_created_again() -> None:
    # Deleted and created again, a Queue would lose its uid and status under the jobs queued in it.
    # A hook is (Helm's default delete policy, before-hook-creation) on every upgrade: Queues are none.
    (queue,) = [
        doc for doc in yaml.safe_load_all(_render_queues("queues[0].name=a", "queues[0].nominalGPUs=8").stdout) if doc
    ]
    annotations = queue["metadata"].get("annotations", {})
    assert not [key for key in annotations if key.startswith("helm.sh/hook")]
    assert annotations["helm.sh/resource-policy"] == "keep"  # nor deleted by uninstall or by leaving the values


def test_queues_before_their_kind_exists_are_refused_with_the_way_out() -> None:
    refused = _render_queues("queues[0].name=a", "queues[0].nominalGPUs=8", kind_exists=False)
    assert refused.returncode != 0
    assert "install without queues, then helm upgrade with them" in refused.stderr
    assert not by_kind(render(), "Queue")  # no queues (the default): the first install goes through


# -- values and their schema ------------------------------------------------


def _undocumented_keys() -> list[str]:
    """Keys without a `# --` comment, except parents whose every key below is documented."""
    lines = VALUES.read_text().splitlines()
    missing, data_indent = [], None
    for index, line in enumerate(lines):
        match = re.match(r"^( *)([\w.\-/]+):", line)
        if not match:
            continue
        indent = len(match.group(1))
        if data_indent is not None and indent > data_indent:
            continue  # inside a documented value's default (a map of data)
        data_indent = None
        previous = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        comment_block = [lines[i].strip() for i in range(index - 1, -1, -1)]
        documented = previous.startswith("#") and any(c.startswith("# --") for c in _comment_run(comment_block))
        is_parent = not line.split(":", 1)[1].strip() and index + 1 < len(lines) and _indent(lines[index + 1]) > indent
        if documented:
            data_indent = indent
        elif not is_parent:
            missing.append(f"{index + 1}: {line.strip()}")
    return missing


def _comment_run(reversed_lines: list[str]) -> list[str]:
    run = []
    for line in reversed_lines:
        if not line.startswith("#"):
            break
        run.append(line)
    return run


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def test_every_value_is_documented() -> None:
    assert not _undocumented_keys()


def test_the_default_values_satisfy_the_schema() -> None:
    jsonschema.validate(yaml.safe_load(VALUES.read_text()), SCHEMA)


BAD_VALUES = [
    ("replicaCount=0", "replicaCount"),
    ("settings.logLevel=LOUD", "logLevel"),
    ("settings.spotNoticeSeconds=1", "spotNoticeSeconds"),
    ("settings.namespaces={Bad_Namespace}", "namespaces"),
    ("metrics.port=80800", "port"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("image.digest=latest", "digest"),
    ("carbon.provider=twitter", "provider"),
    ("serviceMonitor.interval=soon", "interval"),
    ("prometheusRule.alerts.lostWorkRatio=5", "lostWorkRatio"),
    ("prometheusRule.dcgm.podLabel=exported-pod", "podLabel"),
    ("queues[0].name=research", "nominalGPUs"),
    ("queues[0].name=Research,queues[0].nominalGPUs=8", "name"),
    ("queues[0].name=r,queues[0].nominalGPUs=8,queues[0].gpus=8", "gpus"),
    ("leaderElection.leaseName=", "leaseName"),
    ("typo=1", "typo"),
]


@pytest.mark.parametrize(("setting", "named"), BAD_VALUES)
def test_helm_refuses_bad_values_and_names_them(setting: str, named: str) -> None:
    result = template(setting, check=False)
    assert result.returncode != 0, f"{setting} was accepted"
    assert "schema" in result.stderr
    assert named in result.stderr


def test_schema_queue_fields_are_queue_spec_fields() -> None:
    queue_properties = set(SCHEMA["properties"]["queues"]["items"]["properties"]) - {"name"}
    aliases = {field.alias or name for name, field in QueueSpec.model_fields.items()}
    assert queue_properties == aliases


# -- the plain-kubectl bundle -------------------------------------------------


def test_install_bundle_and_rules_file_are_fresh_renders_of_the_chart(tmp_path: Path) -> None:
    subprocess.run(
        [str(REPO_ROOT / "hack" / "render-install.sh"), str(tmp_path)], check=True, capture_output=True, timeout=120
    )
    assert (tmp_path / "install.yaml").read_text() == INSTALL_MANIFEST.read_text(), "run `make generate`"
    assert (tmp_path / "prometheus-rules.yaml").read_text() == RULES_FILE.read_text(), "run `make generate`"


def test_install_bundle_enforces_restricted_pod_security_on_its_namespace() -> None:
    documents = [doc for doc in yaml.safe_load_all(INSTALL_MANIFEST.read_text()) if doc]
    namespace = the(documents, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert documents[0]["kind"] == "Namespace"
    assert the(documents, "Deployment")["metadata"]["namespace"] == namespace["metadata"]["name"]


def test_provisioning_adds_its_grant_its_instance_types_file_and_its_settings(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    instance_types = json.loads((REPO_ROOT / "hack" / "karpenter" / "instance-types.json").read_text())
    values.write_text(json.dumps({"provisioning": {"enabled": True, "instanceTypes": instance_types[:1]}}))
    args = ("template", "aisched", str(CHART), "--namespace", "aisched-system", "-f", str(values))
    output = helm(*args, "--kube-version", kubernetes_version()).stdout
    objects = [doc for doc in yaml.safe_load_all(output) if doc]
    granted = {
        (group, resource, verb)
        for _, rule in _rules(objects)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    extra = {(p.group, p.resource, verb) for p in PROVISIONING_PERMISSIONS for verb in p.verbs}
    assert extra <= granted
    config_map = next(o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-provisioning"))
    assert json.loads(config_map["data"]["instance-types.json"]) == instance_types[:1]
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == "provisioning"]
    settings = _settings_from(container(objects)["env"], clean_environment)
    assert settings.provisioning.enabled
    assert settings.provisioning.instance_types_file == Path(mount["mountPath"]) / "instance-types.json"
    assert settings.provisioning.node_pools == {"Spot": "gpu-spot", "OnDemand": "gpu-on-demand"}
