"""Spec fuzzing against the real API server with the operator running (#16).

Hypothesis makes TrainingJobs, InferenceServices and Queues from the generated CRD
schemas (every bound, one past it, int64's edges, odd names, hostile pod templates;
`schema_values`). Each is either refused by the API server with a readable message
(400/422; a 500 only as Kubernetes' own refusal of an object too large to store) or
accepted and then handled by the operator: a status with a phase or a condition.
Meanwhile the operator stays up and its scheduling cycle keeps completing, and a plain
job is admitted within a bound. Derandomized: CI sees the same objects every run.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aisched.api import GROUP, VERSION
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, wait_for
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job
from tests.integration.schema_values import SchemaValues, names

pytestmark = [pytest.mark.integration]

CRDS = Path(__file__).resolve().parents[2] / "crds"
EXAMPLES = 100
KINDS = {"trainingjobs": "TrainingJob", "inferenceservices": "InferenceService", "queues": "Queue"}
# How the API server refuses an object too large to store, whatever its schema: over 3 MiB as a
# request (413); over etcd's 1.5 MiB request limit or the 2 MiB of its gRPC client with a 500
# that names the limit. Strings at their schema bounds in every field of a closed pod template
# reach those sizes; Kubernetes' own limit, not the operator's, and readable as such.
STORAGE_SIZE_REFUSALS = ("Request entity too large", "request is too large", "trying to send message larger than max")
# Cohorts other tests' queues use: a fuzzed queue must not lend to them or borrow from them.
TAKEN_COHORTS = {"shared", "default"}


def spec_schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"{plural}.{GROUP}.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


@dataclass
class Outcomes:
    refused: Counter[str] = field(default_factory=Counter)
    """Refusals by the field the API server named first."""
    accepted: list[tuple[str, str]] = field(default_factory=list)
    """(plural, name) of what the API server took."""
    tried: Counter[str] = field(default_factory=Counter)

    def refused_readably(self, plural: str, name: str, refusal: ApiException) -> None:
        """Count REFUSAL by what it names, once it is a readable one."""
        if refusal.status in (413, 500) and any(cause in refusal.body for cause in STORAGE_SIZE_REFUSALS):
            self.refused[f"{plural}: too large to store"] += 1
            return
        assert refusal.status in (400, 409, 422), f"{plural} {name}: {refusal.status} {refusal.body}"
        if refusal.status == 409:
            return  # a name hypothesis made twice
        message = json.loads(refusal.body)["message"]
        assert message and "internal error" not in message.lower(), message
        self.refused[f"{plural}: {first_cause(refusal.body)}"] += 1


def first_cause(body: str) -> str:
    details = json.loads(body).get("details") or {}
    causes = details.get("causes") or [{}]
    return str(causes[0].get("field") or causes[0].get("reason") or "object")


@pytest.fixture
def fuzzed_queues(api_client: client.ApiClient) -> Iterator[list[str]]:
    """Queues the test made (cluster-scoped): deleted afterwards."""
    made: list[str] = []
    yield made
    custom = client.CustomObjectsApi(api_client)
    for name in made:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, "queues", name)
        except ApiException as error:
            if error.status != 404:
                raise


def scheduling_cycles(operator: OperatorProcess) -> float:
    """Cycles the operator has completed, from its metrics endpoint."""
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("aisched_scheduling_cycle_seconds_count"):
            return float(line.split()[-1])
    return 0.0


# Strings at their bound (32 KiB in Kubernetes' own template, now closed) make examples of megabytes,
# whose repr hypothesis warns about: the size is the point here, not a mistake.
@pytest.mark.filterwarnings("ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning")
def test_fuzzed_specs_are_refused_readably_or_handled_and_stop_no_one(
    cluster: LocalCluster,
    namespace: str,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    fuzzed_queues: list[str],
) -> None:
    custom = client.CustomObjectsApi(api_client)
    outcomes = Outcomes()
    cases = st.one_of(
        *(
            st.tuples(st.just(plural), names(48, hostile=hostile), SchemaValues(hostile).of(spec_schema(plural)))
            for plural in KINDS
            for hostile in (False, True)
        )
    )
    cycles_before = scheduling_cycles(operator)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        # No shrinking: each example creates an object, so a shrunk one could take the name of the
        # failing example, whose replay would then fail its assume() and hide the real failure.
        phases=[Phase.explicit, Phase.generate],
    )
    @given(cases)
    def submit(case: tuple[str, str, Any]) -> None:
        plural, name, spec = case
        if plural == "queues":
            name = f"fuzz-{name}"
            cohort = spec.get("cohort") if isinstance(spec, dict) else None
            if isinstance(cohort, str) and cohort in TAKEN_COHORTS:
                spec = {**spec, "cohort": f"fuzz-{cohort}"}
        assume((plural, name) not in outcomes.accepted)
        outcomes.tried[plural] += 1
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KINDS[plural], "metadata": {"name": name}, "spec": spec}
        try:
            if plural == "queues":
                custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
            else:
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
        except ApiException as error:
            refusal = error
        else:
            outcomes.accepted.append((plural, name))
            if plural == "queues":
                fuzzed_queues.append(name)
            return
        outcomes.refused_readably(plural, name, refusal)

    submit()
    print(f"tried {dict(outcomes.tried)}; accepted {Counter(p for p, _ in outcomes.accepted)}")
    print(f"refused, by the first field named: {dict(outcomes.refused)}")
    assert outcomes.refused and outcomes.accepted, "the fuzzing should exercise both refusals and acceptances"

    def handled(plural: str, name: str) -> bool:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name).get("status") or {}
        return bool(status.get("phase") or status.get("conditions"))

    jobs = [(p, n) for p, n in outcomes.accepted if p != "queues"]
    # Right after a restart, on a loaded machine, the first pass over a namespace of odd objects can
    # take a while; the unhandled ones are named if it never comes.
    try:
        wait_for(lambda: all(handled(p, n) for p, n in jobs), 3 * TIMEOUT, "every accepted job to be handled")
    except TimeoutError as error:
        unhandled = [
            (p, n, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, p, n).get("spec"))
            for p, n in jobs
            if not handled(p, n)
        ]
        raise TimeoutError(f"{error}\nunhandled: {unhandled}\noperator log:\n{operator.log_tail(80)}") from None
    assert operator.process is not None and operator.process.poll() is None, "the operator must stay up"

    # Everyone else goes on: a plain job is admitted with the fuzzed jobs and queues still there.
    # The fuzzed InferenceServices go first: their replicas are charged to no queue, so one asking
    # for hundreds (as the schema allows) rightly holds every GPU of the small cluster.
    for plural, name in outcomes.accepted:
        if plural == "inferenceservices":
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    apply(cluster, namespace, a_training_job("plain").gpus(1).obj())
    started = time.monotonic()
    wait_for(
        lambda: (
            (
                custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", "plain").get("status")
                or {}
            ).get("phase")
            in ("Placing", "Running")
        ),
        TIMEOUT,
        "the plain job to be admitted",
    )
    print(f"plain job admitted {time.monotonic() - started:.1f} s after it was applied")
    assert scheduling_cycles(operator) > cycles_before
