"""Every example in manifests/examples runs for real on the real nodes, all at once, and gets where it is meant to.

The examples are found by glob, so a new one is covered without touching this file (and fails
here until aisched.testing.examples knows its kind's expected state). They are applied as a
user applies them, with only what the local cluster's real nodes need added
(aisched.testing.examples.for_real_nodes: their GPU product and taint, spot capacity) and the
`checkpoints` claim they mount. Training jobs run their images' scripts to Succeeded (torchrun
DDP, elastic, spot with checkpoints, topology-constrained, and carbon-deferrable, which starts at
once as the tier's operator has no carbon source), the
InferenceService's replicas pass their readinessProbe and its server answers and counts the
request in the series the operator's autoscaler reads, and the Queues are taken in. The
cluster-wide Queues the examples change are put back afterwards for the tests that follow.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from aisched.kube.serving_builders import service_selector
from aisched.testing.cluster import REPO_ROOT, LocalCluster, wait_for
from aisched.testing.examples import checkpoint_storage, failure, for_real_nodes, load_examples, reached
from tests.e2e.conftest import ok

EXAMPLES = REPO_ROOT / "manifests" / "examples"
# Four real GPUs (two nodes of two) for ten GPUs of examples, each of which trains for 10-20 s
# after its image starts (torch's import takes ~5 s); each job is placed within the operator's
# resync of the GPUs freeing up. Measured: all done 125 s after the apply on this 2-core machine,
# busy; the bound is generous, as a loaded machine is slow, not stuck.
ALL_DONE_TIMEOUT = 480
KINDS = "trainingjobs.aisched.io,inferenceservices.aisched.io"


@pytest.fixture
def examples_namespace(api_client: client.ApiClient, cluster: LocalCluster, checkpoint_root: Path) -> Iterator[str]:
    """A plain namespace (no privileged-workloads label: the examples need none) with the `checkpoints` claim."""
    core = client.CoreV1Api(api_client)
    name = f"examples-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    host = checkpoint_root / name
    host.mkdir()
    host.chmod(0o1777)  # the images run as a non-root user
    ok(cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(checkpoint_storage(name, str(host)))))
    try:
        yield name
    finally:
        core.delete_namespace(name)
        cluster.kubectl("delete", "persistentvolume", f"{name}-checkpoints", "--wait=false")


@pytest.fixture
def queues_restored(cluster: LocalCluster) -> Iterator[None]:
    """The examples' Queues are cluster-wide: those that existed get their spec back, the others go."""
    names = [d["metadata"]["name"] for d in load_examples(EXAMPLES) if d["kind"] == "Queue"]
    before = {}
    for name in names:
        found = cluster.kubectl("get", "queues.aisched.io", name, "-o", "json")
        if found.returncode == 0:
            before[name] = json.loads(found.stdout)
    yield
    for name in names:
        if name not in before:
            cluster.kubectl("delete", "queues.aisched.io", name, "--wait=false")
            continue
        current = json.loads(ok(cluster.kubectl("get", "queues.aisched.io", name, "-o", "json")))
        current["spec"] = before[name]["spec"]
        # Unconditional: the operator writes the queue's status meanwhile, which moves its resourceVersion.
        current["metadata"].pop("resourceVersion", None)
        ok(cluster.kubectl("replace", "-f", "-", input=json.dumps(current)))


def _live(cluster: LocalCluster, namespace: str, queues: list[str]) -> dict[str, dict[str, Any]]:
    listed = json.loads(ok(cluster.kubectl("get", KINDS, "-n", namespace, "-o", "json")))["items"]
    for name in queues:
        listed.append(json.loads(ok(cluster.kubectl("get", "queues.aisched.io", name, "-o", "json"))))
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in listed}


def _summary(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return "missing"
    status = obj.get("status") or {}
    said = [f"{c.get('type')}={c.get('status')} {c.get('reason')}" for c in status.get("conditions") or []]
    return f"phase={status.get('phase')} ready={status.get('readyReplicas')} {'; '.join(said)}"


def _answers_and_counts(cluster: LocalCluster, namespace: str, service: str) -> None:
    """One replica of SERVICE answers a completion and counts it in http_requests_total."""
    pods = json.loads(
        ok(cluster.kubectl("get", "pods", "-n", namespace, "-l", service_selector(service), "-o", "json"))
    )["items"]
    pods = [p for p in pods if p["status"].get("phase") == "Running"]
    assert pods, f"no running pods of InferenceService {service}"
    probe = (
        "import json, urllib.request as u\n"
        "r = u.urlopen(u.Request('http://127.0.0.1:8000/v1/completions', "
        "json.dumps({'prompt': 'one two three', 'max_tokens': 2}).encode()))\n"
        "print(json.load(r)['choices'][0]['text'])\n"
        "print(u.urlopen('http://127.0.0.1:8000/metrics').read().decode())\n"
    )
    out = ok(cluster.kubectl("exec", "-n", namespace, pods[0]["metadata"]["name"], "--", "python3", "-c", probe))
    assert out.splitlines()[0] == "three two", out
    assert 'http_requests_total{code="200",path="/v1/completions"} 1.0' in out, out


@pytest.mark.usefixtures("operator_release", "queues_restored")
def test_every_example_runs_on_the_real_nodes(cluster: LocalCluster, examples_namespace: str) -> None:
    namespace = examples_namespace
    documents = load_examples(EXAMPLES)
    assert documents, f"no examples in {EXAMPLES}"
    queues = [d["metadata"]["name"] for d in documents if d["kind"] == "Queue"]
    started = time.monotonic()
    stream = yaml.safe_dump_all([for_real_nodes(d) for d in documents])  # Queues first
    ok(cluster.kubectl("apply", "-n", namespace, "-f", "-", input=stream))

    done: dict[str, float] = {}
    expected = {f"{d['kind']}/{d['metadata']['name']}" for d in documents}

    def all_reached() -> bool:
        live = _live(cluster, namespace, queues)
        for key in sorted(expected - set(done)):
            obj = live.get(key)
            if obj is None:
                continue
            why = failure(obj)
            assert why is None, why
            if reached(obj):
                done[key] = time.monotonic() - started
                if obj["kind"] == "InferenceService":
                    _answers_and_counts(cluster, namespace, obj["metadata"]["name"])
                    # Serving holds its GPUs until deleted: give them to the training jobs.
                    cluster.kubectl("delete", "inferenceservices.aisched.io", "-n", namespace, key.split("/")[1])
        return done.keys() == expected

    try:
        wait_for(all_reached, ALL_DONE_TIMEOUT, "every example in its expected state", interval=2)
    except (TimeoutError, AssertionError) as error:
        live = _live(cluster, namespace, queues)
        left = {key: _summary(live.get(key)) for key in sorted(expected - set(done))}
        pytest.fail(f"{error}\nreached: {done}\nnot reached: {json.dumps(left, indent=1)}")
    print(f"examples reached their states after (s): {json.dumps({k: round(v) for k, v in done.items()})}")
