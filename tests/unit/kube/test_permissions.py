"""The RBAC list is what the code uses: every client call has its grant, every grant a user.

The chart renders `OPERATOR_PERMISSIONS` exactly (tests/tools/test_chart.py) and the API server
answers `kubectl auth can-i` by it (tests/integration/test_helm.py); this holds the list to the
code, so that a call added without its grant, or a grant left behind by a call removed, fails.
"""

from __future__ import annotations

import re

from tests.operator_permissions import (
    CLIENT_CALLS,
    KOPF_NEEDS,
    OPERATOR_PERMISSIONS,
    OWNER_NEEDS,
    PROVISIONING_PERMISSIONS,
    WORKLOAD_PERMISSIONS,
)
from tests.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "aisched"
# The client's API objects as the operator names them: KubeClient's core and custom (also as the
# workload API reaches them, `self.kube.custom`), the Lease store's _api.
CALL = re.compile(r"self\.(?:kube\.)?(?:core|custom|_api)\.([a-z_]+)\b")
# Code that talks to the cluster but is not the operator: test and benchmark drivers.
NOT_THE_OPERATOR = ("testing",)


def calls_in_the_operator() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] in NOT_THE_OPERATOR:
            continue
        found |= set(CALL.findall(path.read_text()))
    return found


def test_every_client_call_of_the_operator_is_accounted_for() -> None:
    calls = calls_in_the_operator()
    assert calls, "the pattern no longer finds the client calls"
    assert calls - set(CLIENT_CALLS) == set(), "calls without a permission in tests/operator_permissions.py"
    assert set(CLIENT_CALLS) - calls == set(), "permissions for calls the operator no longer makes"


def test_the_grants_are_exactly_what_the_calls_kopf_and_owner_references_need() -> None:
    needed = {need for needs in CLIENT_CALLS.values() for need in needs} | set(KOPF_NEEDS) | set(OWNER_NEEDS)
    every = (*OPERATOR_PERMISSIONS, *PROVISIONING_PERMISSIONS, *WORKLOAD_PERMISSIONS)
    granted = {(p.group, p.resource, verb) for p in every for verb in p.verbs}
    assert granted - needed == set(), "granted but used by nothing"
    assert needed - granted == set(), "used but not granted"
