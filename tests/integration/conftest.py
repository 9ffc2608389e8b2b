"""Fixtures of the integration tier: one local GPU cluster per test session.

The cluster (hack/cluster.sh, `small` preset) starts on free ports in a
temporary state directory, so it runs beside a developer's own cluster, and is
torn down when the session ends, Ctrl-C included. Each test gets its own namespace.
"""

from __future__ import annotations

import atexit
import functools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from aisched.testing.cluster import (
    TIMEOUT,
    ClusterError,
    Kubectl,
    LocalCluster,
    apply,
    open_default_queue,
    start_cluster,
    stop_cluster,
    wait_for,
)
from aisched.testing.operator import OperatorProcess
from aisched.testing.workload_policies import workload_policies
from tests.builders import a_queue

# A test that stops an operator or a replica mid-request leaves that request's TLS connection to
# the API server out of the client's pool, so closing the client cannot close it: the socket goes
# with the garbage collector, whose ResourceWarning lands in whichever test runs then (once in CI,
# in a test that had made no client). The client library's socket, not the code under test.
# The same for a plain connection to a loopback server of this tier (the API proxy, Prometheus,
# the operator's own endpoints): once in a kill-at-write test, to a port no fixture of that test
# had opened; which test's client left it is not established.
UNCLOSED_API_SOCKET = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning"
)
UNCLOSED_LOOPBACK_SOCKET = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket.socket .*raddr=\('127\.0\.0\.1':pytest.PytestUnraisableExceptionWarning"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(UNCLOSED_API_SOCKET)
            item.add_marker(UNCLOSED_LOOPBACK_SOCKET)
    # The tier runs on parallel workers, a module each at a time (Makefile, `--dist loadfile` in
    # collection order): the modules of minutes go first, so that no worker is left with one at the end.
    items.sort(key=lambda item: item.get_closest_marker("minutes") is None)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state_dir = tmp_path_factory.mktemp("cluster")
    try:
        local = start_cluster(state_dir, frameworks=True)
    except ClusterError as e:
        pytest.exit(f"the local GPU cluster could not start, so no integration test can run:\n{e}")
    except BaseException:  # Ctrl-C while starting: what did start must stop
        stop_cluster(state_dir)
        raise
    # Should the finalizer not run (the interpreter exits another way), still leave no processes behind.
    atexit.register(stop_cluster, state_dir)
    try:
        yield local
    finally:
        stop_cluster(state_dir)
        atexit.unregister(stop_cluster)


@pytest.fixture(scope="session")
def kubeconfig(cluster: LocalCluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def kubectl(cluster: LocalCluster) -> Kubectl:
    """kubectl(*args, timeout=60, input=None) -> CompletedProcess, against the test cluster."""
    return cluster.kubectl


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default ServiceAccount exists); deleted afterwards."""
    core = client.CoreV1Api(api_client)
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default_serviceaccount() -> Any:
        return core.list_namespaced_service_account(name, field_selector="metadata.name=default").items

    wait_for(has_default_serviceaccount, 30, f"the default ServiceAccount of {name}")
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def crds_installed(cluster: LocalCluster) -> None:
    """aisched's CRDs, applied as `make generate` wrote them, and established."""
    crds = Path(__file__).resolve().parents[2] / "crds"
    applied = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    assert applied.returncode == 0, applied.stderr

    # Polled rather than `kubectl wait`, which gives up at once while a new CRD has no conditions yet.
    def established(crd: str) -> bool:
        jsonpath = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
        return cluster.kubectl("get", f"crd/{crd}", "-o", jsonpath).stdout.strip() == "True"

    for crd in ("trainingjobs.aisched.io", "inferenceservices.aisched.io", "queues.aisched.io"):
        wait_for(functools.partial(established, crd), TIMEOUT, f"CRD {crd} to be established")


@pytest.fixture(scope="session")
def operator(
    cluster: LocalCluster, crds_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator (`aisched run --standalone`) against the test cluster, for the whole session.

    The tests' jobs mostly name no queue: the default queue gets every GPU before the operator
    starts, which would otherwise create it granting none.
    """
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        open_default_queue(api)
    finally:
        api.close()
    process = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def held_kinds(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    """The chart's workload admission policies (held at creation, pods gated, the guard) in NAMESPACE."""
    with workload_policies(cluster, namespace):
        yield


@pytest.fixture
def kinds_queue(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    """A queue of 4 GPUs for the test's namespace alone, for other kinds' workloads (and TrainingJobs)."""
    name = f"kinds-{namespace}"
    obj = a_queue(name, nominal_gpus=4).obj()
    obj["spec"]["namespaces"] = [namespace]
    apply(cluster, "default", obj)
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")
