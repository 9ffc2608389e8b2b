"""Kueue (sigs.k8s.io/kueue, built by `hack/build-k8s-binaries.sh kueue`) configured as its authors
deploy it, but running beside the benchmark's cluster rather than in it.

Its manager always serves its webhooks (cmd/kueue/main.go sets them up unconditionally), and its Job
webhook is what suspends a Job at creation, so they are served and registered: its own webhook
configurations (config/components/webhook/manifests.yaml, scoped as its kustomization scopes them)
pointed at https://127.0.0.1:PORT with a self-signed certificate for that address. Its internal
cert management is off, since it issues a certificate for its in-cluster Service, which the API
server cannot reach here; with it off the manager reads a metrics certificate from the fixed path
/etc/kueue/metrics/certs, so that one is written there for the run and removed after (if this run
made it). Its on-demand visibility API server is off (VISIBILITY_OFF), and its CRDs are applied
without the conversion webhooks its kustomization adds (only for v1beta1 clients; it and this
benchmark speak v1beta2). Everything else is its default Configuration (config/components/manager/).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aisched.testing.cluster import LocalCluster, free_ports, wait_for
from benchmarks.common import REPO_ROOT, InputError
from benchmarks.workloads.objects import (
    KUEUE_QUEUE_LABEL,
    QUEUE,
    kueue_configuration,
    kueue_queue_objects,
    kueue_webhooks,
)

KUEUE_NAMESPACE = "kueue-system"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go reads it there, fixed
# Its on-demand visibility API (pending workloads, for kubectl and dashboards; not on the scheduling
# path) is an aggregated API server of its own that wants a certificate at the fixed /visibility and
# the cluster's request-header delegation, as in cluster: off here.
VISIBILITY_OFF = "VisibilityOnDemand=false"
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-k8s-binaries.sh"
BUILD_HINT = "build it with `hack/build-k8s-binaries.sh kueue`"


@dataclass(frozen=True)
class KueueFiles:
    binary: Path
    crds: Path
    webhooks: Path
    configuration: Path

    @classmethod
    def in_cache(cls, bin_dir: Path) -> KueueFiles:
        """Kueue's files in BIN_DIR, built first when one is missing (a cold build takes minutes)."""
        found = cls(
            bin_dir / "kueue", bin_dir / "kueue-crds", bin_dir / "kueue-webhooks.yaml", bin_dir / "kueue-config.yaml"
        )
        if all(path.exists() for path in vars(found).values()):
            return found
        print(f"building Kueue into {bin_dir}; a cold build takes minutes", file=sys.__stderr__, flush=True)
        built = subprocess.run([str(BUILD_SCRIPT), "kueue"], stdout=subprocess.DEVNULL, check=False)
        missing = [str(path) for path in vars(found).values() if not path.exists()]
        if built.returncode != 0 or missing:
            raise InputError(f"Kueue could not be built ({', '.join(missing) or 'see above'}): {BUILD_HINT}")
        return found


def _ok(result: subprocess.CompletedProcess[str], what: str) -> str:
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def self_signed_certificate(directory: Path) -> str:
    """tls.crt and tls.key for 127.0.0.1 in DIRECTORY (a day's validity); the certificate, base64, as
    a webhook's caBundle wants it."""
    directory.mkdir(parents=True, exist_ok=True)
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(directory / "tls.key")]
    command += ["-out", str(directory / "tls.crt")]
    _ok(subprocess.run(command, capture_output=True, text=True, check=False), "openssl")
    return base64.b64encode((directory / "tls.crt").read_bytes()).decode()


@contextmanager
def metrics_certificate(source: Path) -> Iterator[None]:
    """SOURCE's tls.crt and tls.key at METRICS_CERT_DIR while inside; removed after unless they were there."""
    if (METRICS_CERT_DIR / "tls.crt").exists():
        yield
        return
    top = METRICS_CERT_DIR.parents[1]  # /etc/kueue
    made_top = not top.exists()
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        shutil.copy(source / name, METRICS_CERT_DIR / name)
    try:
        yield
    finally:
        shutil.rmtree(top if made_top else METRICS_CERT_DIR, ignore_errors=True)


def _kubectl_apply(cluster: LocalCluster, objects: list[dict[str, Any]], *args: str) -> None:
    manifest = yaml.safe_dump_all(objects)
    _ok(
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", *args, input=manifest),
        "kubectl apply",
    )


def install_crds(cluster: LocalCluster, files: KueueFiles) -> None:
    for args in (
        ("apply", "--server-side", "--force-conflicts", "-f", str(files.crds)),
        ("wait", "--for=condition=established", "--timeout=60s", "-f", str(files.crds)),
    ):
        _ok(cluster.kubectl(*args), f"kubectl {args[0]} Kueue's CRDs")
    if cluster.kubectl("get", "namespace", KUEUE_NAMESPACE).returncode != 0:
        _ok(cluster.kubectl("create", "namespace", KUEUE_NAMESPACE), "kubectl create namespace")


@dataclass
class KueueProcess:
    cluster: LocalCluster
    files: KueueFiles
    work_dir: Path
    process: subprocess.Popen[bytes] | None = None
    health_port: int = 0
    webhook_url: str = ""

    def start(self) -> None:
        webhook_port, self.health_port, metrics_port = free_ports(3)
        default = yaml.safe_load(self.files.configuration.read_text())
        configuration = kueue_configuration(
            default,
            webhook_port=webhook_port,
            cert_dir=str(self.work_dir / "webhook-certs"),
            health_port=self.health_port,
            metrics_port=metrics_port,
        )
        config_path = self.work_dir / "config.yaml"
        config_path.write_text(yaml.safe_dump(configuration))
        with (self.work_dir / "kueue.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.files.binary), f"--config={config_path}", f"--feature-gates={VISIBILITY_OFF}"],
                env={"KUBECONFIG": str(self.cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._ready, 120, "Kueue's /readyz")
        self.webhook_url = f"https://127.0.0.1:{webhook_port}"

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"Kueue exited; log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        path = self.work_dir / "kueue.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _job_suspended_by_webhook(cluster: LocalCluster, namespace: str) -> bool:
    """Does a server-side dry run of a Job labelled for Kueue come back suspended (its webhook in force)?"""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "kueue-probe", "labels": {KUEUE_QUEUE_LABEL: QUEUE}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
            }
        },
    }
    result = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=yaml.safe_dump(job)
    )
    return result.returncode == 0 and json.loads(result.stdout)["spec"].get("suspend") is True


def _cluster_queue_active(cluster: LocalCluster) -> bool:
    result = cluster.kubectl("get", "clusterqueues.kueue.x-k8s.io", QUEUE, "-o", "json")
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


@contextmanager
def kueue_running(cluster: LocalCluster, namespace: str, gpus: int, work_dir: Path) -> Iterator[KueueProcess]:
    """Kueue's CRDs installed, its manager running with its webhooks registered, and a TAS ClusterQueue
    of GPUS GPUs with a LocalQueue in NAMESPACE active; the webhooks and the manager gone on exit."""
    files = KueueFiles.in_cache(cluster.bin_dir)
    install_crds(cluster, files)
    ca_bundle = self_signed_certificate(work_dir / "webhook-certs")
    kueue = KueueProcess(cluster, files, work_dir)
    webhooks: list[dict[str, Any]] = []
    with metrics_certificate(work_dir / "webhook-certs"):
        try:
            kueue.start()
            manifests = [doc for doc in yaml.safe_load_all(files.webhooks.read_text()) if doc]
            webhooks = kueue_webhooks(manifests, kueue.webhook_url, ca_bundle)
            _kubectl_apply(cluster, webhooks)
            wait_for(lambda: _job_suspended_by_webhook(cluster, namespace), 60, "Kueue's Job webhook in force")
            _kubectl_apply(cluster, kueue_queue_objects(namespace, gpus))
            wait_for(lambda: _cluster_queue_active(cluster), 60, f"ClusterQueue {QUEUE} active")
            yield kueue
        except BaseException:
            print(f"Kueue log (tail):\n{kueue.log_tail()}", flush=True)
            raise
        finally:
            for webhook in webhooks:  # first: a webhook with nobody serving it fails every request it matches
                kind, name = webhook["kind"].lower(), webhook["metadata"]["name"]
                cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")
            kueue.stop()
