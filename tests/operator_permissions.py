"""What the operator's ServiceAccount may do, and why: the one list the unit tier holds the
chart's rendered RBAC to, and the integration tier checks with `kubectl auth can-i`."""

from __future__ import annotations

from dataclasses import dataclass

from aisched.policy.workloads.model import WorkloadKind

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
    *(_p("aisched.io", r, "list watch", "kopf watches them; the loops reconcile them") for r in OWN_RESOURCES),
    _p("aisched.io", "trainingjobs/status", "patch", "phase, conditions, placement"),
    _p("aisched.io", "inferenceservices/status", "patch", "replicas, conditions"),
    _p("aisched.io", "queues/status", "patch", "GPUs used and borrowed"),
    _p("aisched.io", "trainingjobs", "delete", "ttlSecondsAfterFinished deletes finished jobs"),
    _p("aisched.io", "inferenceservices", "patch", "the autoscaler keeps its state in an annotation"),
    _p("aisched.io", "inferenceservices/scale", "patch", "the autoscaler sets replicas as kubectl scale does"),
    *(
        _p("aisched.io", f"{r}/finalizers", "update", "blockOwnerDeletion on the pods and Services it owns")
        for r in ("trainingjobs", "inferenceservices")
    ),
    _p("", "pods", "list watch create delete patch", "workers; the inventory counts every pod's GPUs"),
    _p("", "services", "list create patch", "headless Services of gangs, Services of models; ours on AlreadyExists"),
    _p(
        "resource.k8s.io",
        "resourceclaimtemplates",
        "list create delete",
        "a GPU share's claim, one per pod (gpuShare); a departed replica's deleted; ours on AlreadyExists",
    ),
    _p("resource.k8s.io", "resourceclaims", "list watch", "what pods hold through DRA: their claims as allocated"),
    _p(
        "scheduling.k8s.io",
        "podgroups",
        "get create delete",
        "a gang's PodGroup, one per run, where the cluster serves them; ours on AlreadyExists, an old run's remade",
    ),
    _p("", "nodes", "list watch patch", "GPU capacity, topology, spot labels; a MIG repartition's cordon and label"),
    _p("", "events", "create", "explain decisions in kubectl describe"),
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

# Granted only with provisioning.enabled (settings.provisioning): Karpenter NodeClaims for whole gangs.
PROVISIONING_PERMISSIONS: tuple[Permission, ...] = (
    _p("karpenter.sh", "nodeclaims", "list create delete", "nodes for whole waiting gangs, withdrawn when unneeded"),
    _p("karpenter.sh", "nodepools", "list", "the pools' GPU limits, which Karpenter does not check for our claims"),
)

# Granted with workloads.enabled (the default; Kubernetes 1.36+), one per kind of workloads.kinds
# but plain pods (their gates are lifted by the pods patch above): the kinds teams already run,
# held suspended by the chart's admission policies until the operator admits them.
WORKLOAD_PERMISSIONS: tuple[Permission, ...] = tuple(
    _p(
        group,
        resource,
        "list watch patch",
        "held workloads: watched; unsuspended when admitted, suspended when preempted; their placement recorded",
    )
    for resource, _, group in (kind.value.partition(".") for kind in WorkloadKind if kind is not WorkloadKind.POD_GROUP)
)
# What the chart grants with its default values.
DEFAULT_PERMISSIONS: tuple[Permission, ...] = (*OPERATOR_PERMISSIONS, *WORKLOAD_PERMISSIONS)

Need = tuple[str, str, str]  # group, resource, verb
_WORKLOAD_NEEDS: dict[str, tuple[Need, ...]] = {
    verb: tuple((p.group, p.resource, verb) for p in WORKLOAD_PERMISSIONS) for verb in ("list", "patch")
}

# Every method of the official client the operator calls, and what each needs. A call that is
# not here fails tests/unit/kube/test_permissions.py, so a new call cannot go in without its grant.
CLIENT_CALLS: dict[str, tuple[Need, ...]] = {
    "list_node": (("", "nodes", "list"),),
    "patch_node": (("", "nodes", "patch"),),  # a MIG repartition: cordon, nvidia.com/mig.config, uncordon
    "list_pod_for_all_namespaces": (("", "pods", "list"),),
    # The relist: TrainingJobs and InferenceServices deleted while a watch was away.
    # And Karpenter's NodeClaims the operator made (provisioning).
    "list_cluster_custom_object": (
        ("aisched.io", "trainingjobs", "list"),
        ("aisched.io", "inferenceservices", "list"),
        ("karpenter.sh", "nodeclaims", "list"),
        ("karpenter.sh", "nodepools", "list"),
        ("resource.k8s.io", "resourceclaims", "list"),  # the relist of what pods hold through DRA
        *_WORKLOAD_NEEDS["list"],  # other kinds' workloads, listed whole at start-up (kube/workload_api.py)
    ),
    "create_cluster_custom_object": (("karpenter.sh", "nodeclaims", "create"),),
    "delete_cluster_custom_object": (("karpenter.sh", "nodeclaims", "delete"),),
    # A TrainingJob kept without its large template's process settings is read again at its launch.
    # And, when a create answers AlreadyExists, the object there, to tell ours from anyone else's.
    "list_namespaced_custom_object": (
        ("aisched.io", "trainingjobs", "list"),
        ("resource.k8s.io", "resourceclaimtemplates", "list"),
    ),
    "list_namespaced_pod": (("", "pods", "list"),),
    "list_namespaced_service": (("", "services", "list"),),
    "create_namespaced_pod": (("", "pods", "create"),),
    "delete_namespaced_pod": (("", "pods", "delete"),),
    "patch_namespaced_pod": (("", "pods", "patch"),),
    "create_namespaced_service": (("", "services", "create"),),
    # A pod's GPU share: its ResourceClaimTemplate. A gang's PodGroup (kube/workload_api.py).
    "create_namespaced_custom_object": (
        ("resource.k8s.io", "resourceclaimtemplates", "create"),
        ("scheduling.k8s.io", "podgroups", "create"),
    ),
    # A gang's PodGroup, when its create answers AlreadyExists: ours and this run's, or not.
    "get_namespaced_custom_object": (("scheduling.k8s.io", "podgroups", "get"),),
    "patch_namespaced_service": (("", "services", "patch"),),  # server-side apply
    "create_namespaced_event": (("", "events", "create"),),
    "patch_namespaced_custom_object_status": (
        ("aisched.io", "trainingjobs/status", "patch"),
        ("aisched.io", "inferenceservices/status", "patch"),
    ),
    "patch_cluster_custom_object_status": (("aisched.io", "queues/status", "patch"),),
    "delete_namespaced_custom_object": (
        ("aisched.io", "trainingjobs", "delete"),
        ("resource.k8s.io", "resourceclaimtemplates", "delete"),
        ("scheduling.k8s.io", "podgroups", "delete"),  # an earlier run's, before the new run's is made
    ),
    # And other kinds' workloads: admitted (record, unsuspend) or stopped (suspend) in one patch.
    "patch_namespaced_custom_object": (("aisched.io", "inferenceservices", "patch"), *_WORKLOAD_NEEDS["patch"]),
    "patch_namespaced_custom_object_scale": (("aisched.io", "inferenceservices/scale", "patch"),),
    "read_namespaced_lease": (("coordination.k8s.io", "leases", "get"),),
    "create_namespaced_lease": (("coordination.k8s.io", "leases", "create"),),
    "replace_namespaced_lease": (("coordination.k8s.io", "leases", "update"),),
}

# What kopf does on the operator's behalf: watch what the handlers follow, notice CRD changes,
# post Events for handler errors. It writes nothing else: every handler is an event handler.
KOPF_NEEDS: tuple[Need, ...] = (
    *(
        (group, resource, verb)
        for group, resource in (
            ("", "nodes"),
            ("", "pods"),
            ("resource.k8s.io", "resourceclaims"),
            ("aisched.io", "trainingjobs"),
            ("aisched.io", "inferenceservices"),
            ("aisched.io", "queues"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            *((p.group, p.resource) for p in WORKLOAD_PERMISSIONS),
        )
        for verb in ("list", "watch")
    ),
    ("", "events", "create"),
)

# Clusters that enforce OwnerReferencesPermissionEnforcement let an object name an owner with
# blockOwnerDeletion only for whoever may update that owner's finalizers.
OWNER_NEEDS: tuple[Need, ...] = (
    ("aisched.io", "trainingjobs/finalizers", "update"),
    ("aisched.io", "inferenceservices/finalizers", "update"),
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
    ("apps", "replicasets"),
    ("batch", "cronjobs"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("kopf.dev", "clusterkopfpeerings"),
)


def allowed_verbs(group: str, resource: str, *, own_namespace: bool, name: str | None = None) -> set[str]:
    """Verbs the chart's default values grant on RESOURCE.GROUP (objects named NAME) in the release
    namespace or another."""
    return {
        verb
        for p in DEFAULT_PERMISSIONS
        if (p.group, p.resource) == (group, resource)
        and (own_namespace or not p.own_namespace_only)
        and (p.resource_name is None or p.resource_name == name)
        for verb in p.verbs
    }
