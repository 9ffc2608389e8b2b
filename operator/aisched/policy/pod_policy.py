"""What a queue's worker pods may ask for beyond compute: its `podPolicy`, checked against a job's template.

Creating a TrainingJob or an InferenceService is creating pods, as creating a Job is. The
operator creates them under its own identity, so without this a tenant who may not create
pods would get, through the operator, a privileged pod in the host's namespaces with the
host's root filesystem and any ServiceAccount of its namespace. A queue's cluster
administrator decides what its pods may have, and the default is what the Kubernetes Pod
Security Standards call *baseline*, with the namespace's `default` ServiceAccount only.

The levels are the Pod Security Standards' (https://kubernetes.io/docs/concepts/security/
pod-security-standards/), checked over the whole template as Pod Security Admission checks a
pod: pod and container security contexts, every container and init container, volumes and
the AppArmor annotations. Each `allow*` relaxes one check of the level; the ServiceAccount
and RuntimeClass lists, which the standards leave to RBAC, hold at every level. A template
may hold no ephemeral containers: a pod is never created with them.

Every value comes from a tenant: a field set to anything but absent or false counts as asking.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aisched.policy.sharing.template_devices import GPU_ASKED_THROUGH_SPEC, template_devices

POD_POLICY_VIOLATION = "PodPolicyViolation"


class PodSecurityLevel(StrEnum):
    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


# The Pod Security Standards' lists (Kubernetes 1.35), by the check that uses each.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/pod", "container.seccomp.security.alpha.kubernetes.io/")
DEFAULT_SERVICE_ACCOUNT = "default"


@dataclass(frozen=True, slots=True)
class AllowedHostPath:
    """A hostPath a queue's pods may mount: PATH_PREFIX or below it, read-only if READ_ONLY."""

    path_prefix: str
    read_only: bool = True

    def covers(self, path: str) -> bool:
        prefix = posixpath.normpath(self.path_prefix)
        if not path.startswith("/") or ".." in path.split("/"):
            return False  # the API server refuses such paths; never let one through a prefix
        normal = posixpath.normpath(path)
        return prefix in ("/", normal) or normal.startswith(prefix + "/")


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """A queue's `spec.podPolicy`: a Pod Security level, what it relaxes, and the identities its pods may take."""

    level: PodSecurityLevel = PodSecurityLevel.BASELINE
    allow_privileged: bool = False
    allow_host_network: bool = False
    allow_host_pid: bool = False
    allow_host_ipc: bool = False
    allow_host_ports: bool = False
    allowed_host_paths: tuple[AllowedHostPath, ...] = ()
    allowed_capabilities: frozenset[str] = frozenset()
    allowed_sysctls: frozenset[str] = frozenset()
    allow_unconfined_seccomp: bool = False
    allow_unconfined_app_armor: bool = False
    allow_unmasked_proc_mount: bool = False
    # Restricted only: the baseline level lets each of these through anyway.
    allow_privilege_escalation: bool = False
    allow_run_as_root: bool = False
    allowed_volume_types: frozenset[str] = frozenset()
    # Held at every level: which of the namespace's identities and runtimes a pod may take.
    allowed_service_account_names: frozenset[str] = frozenset({DEFAULT_SERVICE_ACCOUNT})
    allowed_runtime_class_names: frozenset[str] = frozenset()

    def violation(self, template: Mapping[str, Any]) -> Violation | None:
        """The first thing TEMPLATE (a pod template: metadata and spec) asks that this policy does not allow."""
        return next(_violations(self, template), None)


DEFAULT_POD_POLICY = PodPolicy()


@dataclass(frozen=True, slots=True)
class Violation:
    """What a template asks that its queue does not allow: the field, what it is, and the allowance it needs."""

    path: str
    what: str
    allowance: str

    def message(self, queue: str, level: PodSecurityLevel) -> str:
        return (
            f"{self.path}: {self.what}, which queue {queue} does not allow (podPolicy level {level.value}); "
            f"remove it, or ask a cluster administrator for {self.allowance} on the queue"
        )


TEMPLATE = "spec.template"


def _violations(policy: PodPolicy, template: Mapping[str, Any]) -> Iterator[Violation]:
    spec = _object(template.get("spec"))
    pod = f"{TEMPLATE}.spec"
    if _list(spec.get("ephemeralContainers")):
        yield Violation(f"{pod}.ephemeralContainers", "ephemeral containers", "nothing (never allowed in a template)")
    yield from _identity(policy, spec, pod)
    for path, what in template_devices(spec, pod):
        yield Violation(path, what, GPU_ASKED_THROUGH_SPEC)
    if policy.level == PodSecurityLevel.PRIVILEGED:
        return
    restricted = policy.level == PodSecurityLevel.RESTRICTED
    for field, allowed in (
        ("hostNetwork", policy.allow_host_network),
        ("hostPID", policy.allow_host_pid),
        ("hostIPC", policy.allow_host_ipc),
    ):
        if _asks(spec.get(field)) and not allowed:
            yield Violation(
                f"{pod}.{field}", f"{field} shares a host namespace", f"podPolicy.allow{field[0].upper()}{field[1:]}"
            )
    pod_context = _object(spec.get("securityContext"))
    yield from _context(policy, pod_context, f"{pod}.securityContext")
    for index, sysctl in enumerate(_list(pod_context.get("sysctls"))):
        name = _object(sysctl).get("name")
        if not _one_of(name, SAFE_SYSCTLS, policy.allowed_sysctls):
            where = f"{pod}.securityContext.sysctls[{index}]"
            yield Violation(where, f"sysctl {_quoted(name)} is not a safe sysctl", "podPolicy.allowedSysctls")
    yield from _annotations(policy, _object(_object(template.get("metadata")).get("annotations")))
    yield from _volumes(policy, spec, pod, restricted=restricted)
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(kind))):
            yield from _container(policy, _object(container), pod_context, f"{pod}.{kind}[{index}]", restricted)


def _identity(policy: PodPolicy, spec: Mapping[str, Any], pod: str) -> Iterator[Violation]:
    # serviceAccount is the deprecated spelling the API server still reads when serviceAccountName is unset.
    for field in ("serviceAccountName", "serviceAccount"):
        name = spec.get(field)
        if name not in (None, "") and not _one_of(name, policy.allowed_service_account_names):
            yield Violation(
                f"{pod}.{field}",
                f"ServiceAccount {_quoted(name)} is not allowed",
                "podPolicy.allowedServiceAccountNames",
            )
    if DEFAULT_SERVICE_ACCOUNT not in policy.allowed_service_account_names and not (
        spec.get("serviceAccountName") or spec.get("serviceAccount")
    ):
        yield Violation(
            f"{pod}.serviceAccountName",
            "the namespace's default ServiceAccount is not allowed",
            "podPolicy.allowedServiceAccountNames",
        )
    runtime = spec.get("runtimeClassName")
    if runtime not in (None, "") and not _one_of(runtime, policy.allowed_runtime_class_names):
        yield Violation(
            f"{pod}.runtimeClassName",
            f"RuntimeClass {_quoted(runtime)} is not allowed",
            "podPolicy.allowedRuntimeClassNames",
        )


def _context(policy: PodPolicy, context: Mapping[str, Any], where: str) -> Iterator[Violation]:
    """What the baseline level checks in a pod's or a container's securityContext."""
    if _asks(_object(context.get("windowsOptions")).get("hostProcess")) and not policy.allow_privileged:
        yield Violation(f"{where}.windowsOptions.hostProcess", "a Windows host process", "podPolicy.allowPrivileged")
    if _object(context.get("seccompProfile")).get("type") == "Unconfined" and not policy.allow_unconfined_seccomp:
        yield Violation(
            f"{where}.seccompProfile.type", "an Unconfined seccomp profile", "podPolicy.allowUnconfinedSeccomp"
        )
    app_armor = _object(context.get("appArmorProfile")).get("type")
    if app_armor not in (None, "RuntimeDefault", "Localhost") and not policy.allow_unconfined_app_armor:
        yield Violation(
            f"{where}.appArmorProfile.type",
            f"AppArmor profile {_quoted(app_armor)}",
            "podPolicy.allowUnconfinedAppArmor",
        )
    se_linux = _object(context.get("seLinuxOptions"))
    if not _one_of(se_linux.get("type", ""), SELINUX_TYPES) or se_linux.get("user") or se_linux.get("role"):
        yield Violation(f"{where}.seLinuxOptions", "custom SELinux options", "podPolicy level privileged")


def _container(
    policy: PodPolicy, container: Mapping[str, Any], pod_context: Mapping[str, Any], where: str, restricted: bool
) -> Iterator[Violation]:
    context = _object(container.get("securityContext"))
    here = f"{where}.securityContext"
    if _asks(context.get("privileged")) and not policy.allow_privileged:
        yield Violation(f"{here}.privileged", "a privileged container", "podPolicy.allowPrivileged")
    yield from _context(policy, context, here)
    if context.get("procMount") not in (None, "Default") and not policy.allow_unmasked_proc_mount:
        yield Violation(
            f"{here}.procMount", f"procMount {_quoted(context.get('procMount'))}", "podPolicy.allowUnmaskedProcMount"
        )
    level_set = RESTRICTED_CAPABILITIES if restricted else BASELINE_CAPABILITIES
    for index, added in enumerate(_list(_object(context.get("capabilities")).get("add"))):
        if not _one_of(added, level_set, policy.allowed_capabilities):
            yield Violation(
                f"{here}.capabilities.add[{index}]", f"capability {_quoted(added)}", "podPolicy.allowedCapabilities"
            )
    for index, port in enumerate(_list(container.get("ports"))):
        if _asks(_object(port).get("hostPort")) and not policy.allow_host_ports:
            yield Violation(f"{where}.ports[{index}].hostPort", "a host port", "podPolicy.allowHostPorts")
    if restricted:
        yield from _restricted(policy, context, pod_context, here)


def _restricted(
    policy: PodPolicy, context: Mapping[str, Any], pod_context: Mapping[str, Any], here: str
) -> Iterator[Violation]:
    """What the restricted level adds for one container, whose securityContext is CONTEXT, at HERE."""
    if context.get("allowPrivilegeEscalation") is not False and not policy.allow_privilege_escalation:
        yield Violation(
            f"{here}.allowPrivilegeEscalation",
            "privilege escalation (it must be false)",
            "podPolicy.allowPrivilegeEscalation",
        )
    if "ALL" not in _list(_object(context.get("capabilities")).get("drop")):
        yield Violation(
            f"{here}.capabilities.drop", "capabilities kept (drop must hold ALL)", "podPolicy level baseline"
        )
    if not policy.allow_run_as_root:
        # A container's own setting wins over the pod's, as the kubelet applies them.
        non_root = context["runAsNonRoot"] if "runAsNonRoot" in context else pod_context.get("runAsNonRoot")
        if non_root is not True:
            yield Violation(
                f"{here}.runAsNonRoot", "running as root (runAsNonRoot must be true)", "podPolicy.allowRunAsRoot"
            )
        for scope, ctx in ((here, context), (f"{TEMPLATE}.spec.securityContext", pod_context)):
            if ctx.get("runAsUser") == 0:
                yield Violation(f"{scope}.runAsUser", "user 0 (root)", "podPolicy.allowRunAsRoot")
    seccomp = _object(context.get("seccompProfile") or pod_context.get("seccompProfile")).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost") and not policy.allow_unconfined_seccomp:
        yield Violation(
            f"{here}.seccompProfile.type",
            "no seccomp profile (RuntimeDefault or Localhost is needed)",
            "podPolicy.allowUnconfinedSeccomp",
        )


def _volumes(policy: PodPolicy, spec: Mapping[str, Any], pod: str, *, restricted: bool) -> Iterator[Violation]:
    for index, entry in enumerate(_list(spec.get("volumes"))):
        volume = _object(entry)
        where = f"{pod}.volumes[{index}]"
        for kind in (k for k in volume if k != "name"):
            if kind == "hostPath":
                path = _object(volume.get("hostPath")).get("path")
                yield from _host_path(policy, spec, volume.get("name"), path, f"{where}.hostPath")
            elif restricted and not _one_of(kind, RESTRICTED_VOLUME_TYPES, policy.allowed_volume_types):
                yield Violation(f"{where}.{kind}", f"a volume of type {kind}", "podPolicy.allowedVolumeTypes")


def _host_path(policy: PodPolicy, spec: Mapping[str, Any], name: Any, path: Any, where: str) -> Iterator[Violation]:
    covering = [a for a in policy.allowed_host_paths if isinstance(path, str) and a.covers(path)]
    if not covering:
        yield Violation(f"{where}.path", f"host path {_quoted(path)}", "podPolicy.allowedHostPaths covering it")
        return
    if any(not a.read_only for a in covering):
        return
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(kind))):
            for mount_index, entry in enumerate(_list(_object(container).get("volumeMounts"))):
                mount = _object(entry)
                if mount.get("name") == name and mount.get("readOnly") is not True:
                    yield Violation(
                        f"{TEMPLATE}.spec.{kind}[{index}].volumeMounts[{mount_index}].readOnly",
                        f"a writable mount of host path {_quoted(path)}",
                        "podPolicy.allowedHostPaths with readOnly: false",
                    )


def _annotations(policy: PodPolicy, annotations: Mapping[str, Any]) -> Iterator[Violation]:
    for key, value in annotations.items():
        where = f"{TEMPLATE}.metadata.annotations[{key}]"
        if (
            isinstance(key, str)
            and key.startswith(APPARMOR_ANNOTATION)
            and value not in ("", "runtime/default")
            and not str(value).startswith("localhost/")
            and not policy.allow_unconfined_app_armor
        ):
            yield Violation(where, f"AppArmor profile {_quoted(value)}", "podPolicy.allowUnconfinedAppArmor")
        unconfined = isinstance(key, str) and key.startswith(SECCOMP_ANNOTATIONS) and value == "unconfined"
        if unconfined and not policy.allow_unconfined_seccomp:
            yield Violation(where, "an unconfined seccomp profile", "podPolicy.allowUnconfinedSeccomp")


def _one_of(value: Any, *allowed: frozenset[str]) -> bool:
    """VALUE is a string in one of the ALLOWED sets (a tenant's list or map is in none, and raises nothing)."""
    return isinstance(value, str) and any(value in names for names in allowed)


def _asks(value: Any) -> bool:
    """A tenant's value for a flag or a port: anything but absent, false or 0 asks for it."""
    return value is not None and value is not False and value != 0


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _quoted(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 64 else text[:61] + "..."


def pod_policy_from_wire(raw: Any) -> PodPolicy:
    """A Queue's `spec.podPolicy` as stored; what does not read as an allowance allows nothing.

    The API server holds a Queue to its schema, so this matters only for an object older or
    looser than this operator: an unreadable allowance fails closed, to the default.
    """
    spec = _object(raw)
    try:
        level = PodSecurityLevel(spec.get("level", PodSecurityLevel.BASELINE))
    except ValueError:
        level = PodSecurityLevel.RESTRICTED
    flags = {
        name: spec.get(wire) is True
        for name, wire in (
            ("allow_privileged", "allowPrivileged"),
            ("allow_host_network", "allowHostNetwork"),
            ("allow_host_pid", "allowHostPID"),
            ("allow_host_ipc", "allowHostIPC"),
            ("allow_host_ports", "allowHostPorts"),
            ("allow_unconfined_seccomp", "allowUnconfinedSeccomp"),
            ("allow_unconfined_app_armor", "allowUnconfinedAppArmor"),
            ("allow_unmasked_proc_mount", "allowUnmaskedProcMount"),
            ("allow_privilege_escalation", "allowPrivilegeEscalation"),
            ("allow_run_as_root", "allowRunAsRoot"),
        )
    }
    host_paths = tuple(
        AllowedHostPath(entry["pathPrefix"], entry.get("readOnly") is not False)
        for entry in map(_object, _list(spec.get("allowedHostPaths")))
        if isinstance(entry.get("pathPrefix"), str) and entry["pathPrefix"].startswith("/")
    )
    accounts = spec.get("allowedServiceAccountNames", [DEFAULT_SERVICE_ACCOUNT])
    return PodPolicy(
        level=level,
        allowed_host_paths=host_paths,
        allowed_capabilities=_strings(spec.get("allowedCapabilities")),
        allowed_sysctls=_strings(spec.get("allowedSysctls")),
        allowed_volume_types=_strings(spec.get("allowedVolumeTypes")),
        allowed_service_account_names=_strings(accounts),
        allowed_runtime_class_names=_strings(spec.get("allowedRuntimeClassNames")),
        **flags,
    )


def _strings(value: Any) -> frozenset[str]:
    return frozenset(item for item in _list(value) if isinstance(item, str) and item)
