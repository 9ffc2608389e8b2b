"""What the operator's ServiceAccount may do, and why: the one list the unit tier holds the
chart's rendered RBAC to, and the integration tier checks with `kubectl auth can-i`."""

from __future__ import annotations

from dataclasses import dataclass

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
LEASE_NAME = "aisched-leader"


@dataclass(frozen=True)
class Permission:
    group: str  # "" is the core group
    resource: str
    verbs: frozenset[str]
    why: str
    own_namespace_only: bool = False  # a Role in the release namespace, not a ClusterRole
    resource_name: str | None = None

    @property
    def qualified(self) -> str:
        """RESOURCE.GROUP as kubectl spells it."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


def _p(group: str, resource: str, verbs: str, why: str, **kwargs: object) -> Permission:
    return Permission(group, resource, frozenset(verbs.split()), why, **kwargs)  # type: ignore[arg-type]


OWN_RESOURCES = ("trainingjobs", "inferenceservices", "queues")

OPERATOR_PERMISSIONS: tuple[Permission, ...] = (
    *(
        _p("aisched.io", r, "get list watch patch update", "reconcile; kopf finalizers and progress")
        for r in OWN_RESOURCES
    ),
    *(_p("aisched.io", f"{r}/status", "get patch update", "phase, conditions, placement") for r in OWN_RESOURCES),
    _p("aisched.io", "queues", "create", "the default Queue"),
    _p("aisched.io", "trainingjobs", "delete", "ttlSecondsAfterFinished deletes finished jobs"),
    _p("aisched.io", "inferenceservices/scale", "get patch", "the autoscaler sets replicas as kubectl scale does"),
    _p("", "pods", "get list watch create delete patch", "workers; the inventory counts every pod's GPUs"),
    _p("", "services", "get list watch create delete patch", "headless Services of gangs, Services of models"),
    _p("", "nodes", "get list watch", "GPU capacity, topology, spot labels, interruption taints"),
    _p("", "events", "create patch", "explain decisions in kubectl describe"),
    _p("events.k8s.io", "events", "create patch", "explain decisions in kubectl describe"),
    _p("apiextensions.k8s.io", "customresourcedefinitions", "list watch", "kopf notices CRD changes"),
    _p("coordination.k8s.io", "leases", "create", "first replica creates the leader Lease", own_namespace_only=True),
    _p(
        "coordination.k8s.io",
        "leases",
        "get update",
        "hold and renew the leader Lease",
        own_namespace_only=True,
        resource_name=LEASE_NAME,
    ),
)

# Things an operator could be tempted to use, that this one must not (no verb at all).
FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("", "secrets"),
    ("", "configmaps"),
    ("", "serviceaccounts"),
    ("", "namespaces"),
    ("", "pods/exec"),
    ("", "pods/eviction"),
    ("", "persistentvolumeclaims"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("batch", "jobs"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("kopf.dev", "clusterkopfpeerings"),
)


def allowed_verbs(group: str, resource: str, *, own_namespace: bool, name: str | None = None) -> set[str]:
    """Verbs the list grants on RESOURCE.GROUP (objects named NAME) in the release namespace or another."""
    return {
        verb
        for p in OPERATOR_PERMISSIONS
        if (p.group, p.resource) == (group, resource)
        and (own_namespace or not p.own_namespace_only)
        and (p.resource_name is None or p.resource_name == name)
        for verb in p.verbs
    }
