"""The CRDs on a real API server: examples pass, every kind of mistake is refused
by the API server itself with a message a person understands."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aisched.testing.cluster import LocalCluster
from tests.mistakes import MISTAKES, Mistake

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def _dry_run(cluster: LocalCluster, namespace: str, manifest: str) -> tuple[int, str]:
    result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=manifest)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.usefixtures("crds_installed")
@pytest.mark.parametrize("example", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_is_accepted(cluster: LocalCluster, namespace: str, example: Path) -> None:
    code, output = _dry_run(cluster, namespace, example.read_text())
    assert code == 0, output


@pytest.mark.usefixtures("crds_installed")
@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_api_server_rejects_each_mistake_clearly(cluster: LocalCluster, namespace: str, mistake: Mistake) -> None:
    code, output = _dry_run(cluster, namespace, yaml.safe_dump(mistake.obj))
    assert code != 0, f"{mistake.name} was accepted"
    assert mistake.server_says in output, output


@pytest.mark.usefixtures("crds_installed")
def test_defaults_are_filled_in_by_the_api_server(cluster: LocalCluster, namespace: str) -> None:
    manifest = (EXAMPLES / "trainingjob-basic.yaml").read_text()
    result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-o", "yaml", "-f", "-", input=manifest)
    spec = yaml.safe_load(result.stdout)["spec"]
    assert spec["queue"] == "default"
    assert spec["spot"] == {"policy": "Never"}
    assert spec["runPolicy"] == {"backoffLimit": 3}
    assert spec["carbon"]["deferrable"] is False


@pytest.mark.usefixtures("crds_installed")
def test_kubectl_shows_short_names_columns_and_category(cluster: LocalCluster) -> None:
    resources = cluster.kubectl("api-resources", "--api-group=aisched.io", "-o", "wide").stdout
    assert all(short in resources for short in ("aitj", "aisvc", "aiq"))
    assert "aisched" in resources  # the category: `kubectl get aisched`
    columns = (
        cluster.kubectl("get", "tj", "-A", "-o", "wide").stdout
        + cluster.kubectl(
            "get",
            "crd",
            "trainingjobs.aisched.io",
            "-o",
            "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
        ).stdout
    )
    for column in ("Phase", "GPUs", "Queue", "Placement", "Reason"):
        assert column in columns


@pytest.mark.usefixtures("crds_installed")
def test_fields_kubernetes_does_not_define_are_pruned_from_the_template(cluster: LocalCluster, namespace: str) -> None:
    # Issue #27: padding in an open template field cost the API server ~280 MiB an object.
    job = yaml.safe_load((EXAMPLES / "trainingjob-basic.yaml").read_text())
    job["metadata"]["name"] = "padded"
    template = job["spec"]["template"]
    template["padding"] = [{}] * 1000
    template["metadata"] = {"labels": {"team": "nlp"}, "uid": "not-a-template-field"}
    template["spec"]["padding"] = [{}] * 1000
    container = template["spec"]["containers"][0]
    container["padding"] = [{}] * 1000
    container["resources"] = {**container.get("resources", {}), "padding": {"x": [{}] * 1000}}
    container["securityContext"] = {"runAsUser": 1000, "padding": [{}] * 1000}
    manifest = yaml.safe_dump(job)
    strict = cluster.kubectl("create", "-n", namespace, "-f", "-", input=manifest)  # kubectl validates strictly
    assert strict.returncode != 0 and 'unknown field "spec.template.padding"' in strict.stderr, strict.stderr
    # Clients that do not ask for strict validation (the API's default, Warn) get the object pruned.
    created = cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-", input=manifest)
    assert created.returncode == 0, created.stderr
    stored = cluster.kubectl("get", "-n", namespace, "trainingjob/padded", "-o", "json").stdout
    assert "padding" not in stored and "not-a-template-field" not in stored
    kept = yaml.safe_load(stored)["spec"]["template"]
    assert kept["metadata"] == {"labels": {"team": "nlp"}}
    assert kept["spec"]["containers"][0]["securityContext"] == {"runAsUser": 1000}
