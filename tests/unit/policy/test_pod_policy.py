"""A queue's podPolicy over job templates: the Pod Security levels, the allowances that relax
them one by one, the identities a pod may take, and what a policy read off the wire means."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aisched.policy.pod_policy import (
    BASELINE_CAPABILITIES,
    DEFAULT_POD_POLICY,
    POD_POLICY_VIOLATION,
    AllowedHostPath,
    PodPolicy,
    PodSecurityLevel,
    pod_policy_from_wire,
)
from aisched.policy.tenancy import Tenancy

POD = "spec.template.spec"
RESTRICTED = PodPolicy(level=PodSecurityLevel.RESTRICTED)
PRIVILEGED = PodPolicy(level=PodSecurityLevel.PRIVILEGED)


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}], **spec}}


def with_container(**container: Any) -> dict[str, Any]:
    return template(containers=[{"name": "trainer", "image": "trainer:1", **container}])


# The attack of issue #27: what a tenant who may not create pods got through the operator.
ATTACK = template(
    hostPID=True,
    hostNetwork=True,
    serviceAccountName="deployer",
    volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    containers=[
        {
            "name": "trainer",
            "image": "trainer:1",
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "root", "mountPath": "/host"}],
        }
    ],
)
RESTRICTED_CONTAINER: dict[str, Any] = {
    "name": "trainer",
    "image": "trainer:1",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


def path_of(policy: PodPolicy, asked: dict[str, Any]) -> str | None:
    violation = policy.violation(asked)
    return violation.path if violation else None


def test_the_attack_of_issue_27_is_refused_by_default_naming_the_field_and_the_queue() -> None:
    refused = Tenancy().refusal("research", "team-a", 0, [], ATTACK)
    assert refused is not None and refused.reason == POD_POLICY_VIOLATION
    assert refused.message.startswith(f"{POD}.serviceAccountName: ServiceAccount deployer is not allowed")
    assert "queue research does not allow (podPolicy level baseline)" in refused.message
    assert "podPolicy.allowedServiceAccountNames" in refused.message
    # Each part of it is refused on its own too.
    for field in ("hostPID", "hostNetwork"):
        assert path_of(DEFAULT_POD_POLICY, template(**{field: True})) == f"{POD}.{field}"
    privileged = with_container(securityContext={"privileged": True})
    assert path_of(DEFAULT_POD_POLICY, privileged) == f"{POD}.containers[0].securityContext.privileged"
    host_root = template(volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    assert path_of(DEFAULT_POD_POLICY, host_root) == f"{POD}.volumes[0].hostPath.path"


def test_a_queue_that_allows_each_part_takes_the_attack() -> None:
    everything = PodPolicy(
        allow_privileged=True,
        allow_host_pid=True,
        allow_host_network=True,
        allowed_host_paths=(AllowedHostPath("/", read_only=False),),
        allowed_service_account_names=frozenset({"deployer"}),
    )
    assert everything.violation(ATTACK) is None
    # The privileged level lifts the Pod Security checks, not the ServiceAccounts or RuntimeClasses.
    assert path_of(PRIVILEGED, ATTACK) == f"{POD}.serviceAccountName"
    assert path_of(PRIVILEGED, template(runtimeClassName="kata")) == f"{POD}.runtimeClassName"
    assert (
        PodPolicy(level=PodSecurityLevel.PRIVILEGED, allowed_service_account_names=frozenset({"deployer"})).violation(
            ATTACK
        )
        is None
    )


@pytest.mark.parametrize(
    ("asked", "path"),
    [
        (template(hostIPC=True), f"{POD}.hostIPC"),
        (template(serviceAccount="deployer"), f"{POD}.serviceAccount"),
        (template(runtimeClassName="nvidia"), f"{POD}.runtimeClassName"),
        (template(ephemeralContainers=[{"name": "e", "image": "x"}]), f"{POD}.ephemeralContainers"),
        (
            template(initContainers=[{"name": "i", "image": "x", "securityContext": {"privileged": True}}]),
            f"{POD}.initContainers[0].securityContext.privileged",
        ),
        (with_container(ports=[{"containerPort": 80, "hostPort": 80}]), f"{POD}.containers[0].ports[0].hostPort"),
        (
            with_container(securityContext={"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}}),
            f"{POD}.containers[0].securityContext.capabilities.add[1]",
        ),
        (
            with_container(securityContext={"procMount": "Unmasked"}),
            f"{POD}.containers[0].securityContext.procMount",
        ),
        (
            template(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            f"{POD}.securityContext.seccompProfile.type",
        ),
        (
            with_container(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
            f"{POD}.containers[0].securityContext.appArmorProfile.type",
        ),
        (
            template(securityContext={"seLinuxOptions": {"type": "spc_t"}}),
            f"{POD}.securityContext.seLinuxOptions",
        ),
        (
            template(securityContext={"windowsOptions": {"hostProcess": True}}),
            f"{POD}.securityContext.windowsOptions.hostProcess",
        ),
        (
            template(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
            f"{POD}.securityContext.sysctls[0]",
        ),
        (
            {
                "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"}},
                **template(),
            },
            "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/trainer]",
        ),
        # A value of the wrong type still asks: the API server, not this check, would refuse it.
        (template(hostNetwork="yes"), f"{POD}.hostNetwork"),
        (template(serviceAccountName={"name": "deployer"}), f"{POD}.serviceAccountName"),
        (
            with_container(securityContext={"capabilities": {"add": [["SYS_ADMIN"]]}}),
            f"{POD}.containers[0].securityContext.capabilities.add[0]",
        ),
        (template(securityContext={"seLinuxOptions": {"type": ["spc_t"]}}), f"{POD}.securityContext.seLinuxOptions"),
    ],
)
def test_what_the_baseline_level_refuses(asked: dict[str, Any], path: str) -> None:
    assert path_of(DEFAULT_POD_POLICY, asked) == path


@pytest.mark.parametrize(
    "allowed",
    [
        template(serviceAccountName="default"),
        template(securityContext={"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]}),
        with_container(securityContext={"capabilities": {"add": sorted(BASELINE_CAPABILITIES)}}),
        with_container(securityContext={"allowPrivilegeEscalation": True, "runAsUser": 0}),
        with_container(ports=[{"containerPort": 80, "hostPort": 0}]),
        template(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}, {"name": "s", "nfs": {}}]),
        template(securityContext={"seccompProfile": {"type": "RuntimeDefault"}, "seLinuxOptions": {"level": "s0"}}),
        template(hostNetwork=False, hostPID=False),
        {
            "metadata": {
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/trainer": "localhost/trainer",
                    "container.apparmor.security.beta.kubernetes.io/side": "",
                }
            },
            **template(),
        },
    ],
)
def test_what_the_baseline_level_takes(allowed: dict[str, Any]) -> None:
    assert DEFAULT_POD_POLICY.violation(allowed) is None


def test_the_restricted_level_asks_for_a_locked_down_container_and_its_allowances_relax_it() -> None:
    assert RESTRICTED.violation(template(containers=[RESTRICTED_CONTAINER])) is None
    where = f"{POD}.containers[0].securityContext"
    assert path_of(RESTRICTED, template()) == f"{where}.allowPrivilegeEscalation"
    loose = copy.deepcopy(RESTRICTED_CONTAINER)
    del loose["securityContext"]["runAsNonRoot"]
    assert path_of(RESTRICTED, template(containers=[loose])) == f"{where}.runAsNonRoot"
    # The pod's runAsNonRoot and seccomp profile cover its containers.
    pod_wide = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    del loose["securityContext"]["seccompProfile"]
    assert RESTRICTED.violation(template(containers=[loose], securityContext=pod_wide)) is None
    assert path_of(RESTRICTED, template(containers=[loose], securityContext={**pod_wide, "runAsUser": 0})) == (
        f"{POD}.securityContext.runAsUser"
    )
    nfs = template(containers=[RESTRICTED_CONTAINER], volumes=[{"name": "n", "nfs": {"server": "x", "path": "/"}}])
    assert path_of(RESTRICTED, nfs) == f"{POD}.volumes[0].nfs"
    assert PodPolicy(level=PodSecurityLevel.RESTRICTED, allowed_volume_types=frozenset({"nfs"})).violation(nfs) is None
    root = template(containers=[{"name": "t", "image": "t", "securityContext": {"allowPrivilegeEscalation": False}}])
    relaxed = PodPolicy(
        level=PodSecurityLevel.RESTRICTED, allow_run_as_root=True, allow_unconfined_seccomp=True
    ).violation(root)
    assert relaxed is not None and relaxed.path == f"{POD}.containers[0].securityContext.capabilities.drop"


def test_host_paths_are_allowed_under_their_prefixes_only_and_read_only_where_so_allowed() -> None:
    data = PodPolicy(allowed_host_paths=(AllowedHostPath("/data/"),))

    def mounting(path: str, *, read_only: bool | None = True) -> dict[str, Any]:
        mount: dict[str, Any] = {"name": "h", "mountPath": "/mnt"}
        if read_only is not None:
            mount["readOnly"] = read_only
        return template(
            volumes=[{"name": "h", "hostPath": {"path": path}}],
            containers=[{"name": "t", "image": "t", "volumeMounts": [mount]}],
        )

    for inside in ("/data", "/data/", "/data/team-a", "/data//team-a/./x"):
        assert data.violation(mounting(inside)) is None, inside
    for outside in ("/data2", "/", "/etc", "/data/../etc", "data/x", "/var/data"):
        assert path_of(data, mounting(outside)) == f"{POD}.volumes[0].hostPath.path", outside
    for writable in (False, None):
        assert path_of(data, mounting("/data/x", read_only=writable)) == f"{POD}.containers[0].volumeMounts[0].readOnly"
    assert (
        PodPolicy(allowed_host_paths=(AllowedHostPath("/data", read_only=False),)).violation(
            mounting("/data/x", read_only=False)
        )
        is None
    )


def test_a_queue_may_take_the_default_service_account_away() -> None:
    trainer_only = PodPolicy(allowed_service_account_names=frozenset({"trainer"}))
    assert path_of(trainer_only, template()) == f"{POD}.serviceAccountName"
    assert trainer_only.violation(template(serviceAccountName="trainer")) is None


def test_a_policy_read_off_the_wire_allows_only_what_it_says_and_fails_closed() -> None:
    assert pod_policy_from_wire(None) == DEFAULT_POD_POLICY
    assert pod_policy_from_wire({}) == DEFAULT_POD_POLICY
    read = pod_policy_from_wire(
        {
            "level": "restricted",
            "allowHostPID": True,
            "allowPrivileged": "true",  # not a boolean: allows nothing
            "allowedHostPaths": [{"pathPrefix": "/data"}, {"pathPrefix": "relative"}, "junk"],
            "allowedCapabilities": ["IPC_LOCK", 3],
            "allowedServiceAccountNames": ["trainer"],
            "allowedRuntimeClassNames": "nvidia",
        }
    )
    assert read.level == PodSecurityLevel.RESTRICTED
    assert read.allow_host_pid and not read.allow_privileged
    assert read.allowed_host_paths == (AllowedHostPath("/data", read_only=True),)
    assert read.allowed_capabilities == frozenset({"IPC_LOCK"})
    assert read.allowed_service_account_names == frozenset({"trainer"})
    assert read.allowed_runtime_class_names == frozenset()
    assert pod_policy_from_wire({"level": "lenient"}).level == PodSecurityLevel.RESTRICTED


# -- properties ------------------------------------------------------------------------------------

BENIGN_VOLUMES = st.sampled_from(
    [
        {"name": "scratch", "emptyDir": {}},
        {"name": "config", "configMap": {"name": "c"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        {"name": "token", "projected": {"sources": []}},
    ]
)
CONTEXTS = st.fixed_dictionaries(
    {},
    optional={
        "allowPrivilegeEscalation": st.booleans(),
        "runAsNonRoot": st.booleans(),
        "runAsUser": st.integers(0, 70000),
        "privileged": st.just(False),
        "readOnlyRootFilesystem": st.booleans(),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "add": st.lists(st.sampled_from(sorted(BASELINE_CAPABILITIES)), max_size=3),
                "drop": st.just(["ALL"]),
            },
        ),
        "seccompProfile": st.sampled_from([{"type": "RuntimeDefault"}, {"type": "Localhost", "localhostProfile": "p"}]),
    },
)
CONTAINERS = st.builds(
    lambda index, context, port: {
        "name": f"c{index}",
        "image": "img:1",
        "securityContext": context,
        "ports": [{"containerPort": port}],
    },
    st.integers(0, 99),
    CONTEXTS,
    st.integers(1, 65535),
)
# Templates the default policy should take, and, mixed in, fields it must refuse.
FORBIDDEN_POD_FIELDS: dict[str, Any] = {
    "hostNetwork": True,
    "hostPID": True,
    "hostIPC": True,
    "serviceAccountName": "deployer",
    "runtimeClassName": "kata",
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
}
TEMPLATES = st.builds(
    lambda containers, volumes, account, extra: {
        "spec": {
            "containers": containers,
            "volumes": volumes,
            **({"serviceAccountName": account} if account else {}),
            **extra,
        }
    },
    st.lists(CONTAINERS, min_size=1, max_size=3),
    st.lists(BENIGN_VOLUMES, max_size=3),
    st.sampled_from([None, "", "default"]),
    st.dictionaries(st.sampled_from(sorted(FORBIDDEN_POD_FIELDS)), st.just(None), max_size=2).map(
        lambda keys: {k: FORBIDDEN_POD_FIELDS[k] for k in keys}
    ),
)


@given(TEMPLATES)
def test_a_template_the_default_policy_takes_asks_nothing_beyond_compute(asked: dict[str, Any]) -> None:
    spec = asked["spec"]
    if DEFAULT_POD_POLICY.violation(asked) is not None:
        # Nor does it refuse one that asks nothing: only the forbidden fields mixed in are refused.
        assert FORBIDDEN_POD_FIELDS.keys() & spec.keys()
        return
    assert not any(spec.get(f) for f in ("hostNetwork", "hostPID", "hostIPC", "runtimeClassName"))
    assert spec.get("serviceAccountName") in (None, "", "default")
    assert not any("hostPath" in volume for volume in spec.get("volumes", []))
    for container in spec["containers"]:
        context = container.get("securityContext", {})
        assert not context.get("privileged")
        assert set(context.get("capabilities", {}).get("add", [])) <= BASELINE_CAPABILITIES
        assert not any(port.get("hostPort") for port in container.get("ports", []))


def _mutations() -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    """Forbidden things added to a taken template, each returning the path it must be refused at."""

    def pod_field(field: str, value: Any) -> Callable[[dict[str, Any]], str]:
        def add(spec: dict[str, Any]) -> str:
            spec[field] = value
            return f"{POD}.{field}"

        return add

    def container_context(field: str, value: Any, suffix: str = "") -> Callable[[dict[str, Any]], str]:
        def add(spec: dict[str, Any]) -> str:
            spec["containers"][-1].setdefault("securityContext", {})[field] = value
            return f"{POD}.containers[{len(spec['containers']) - 1}].securityContext.{field}{suffix}"

        return add

    def host_path(spec: dict[str, Any]) -> str:
        spec.setdefault("volumes", []).append({"name": "host", "hostPath": {"path": "/var/lib"}})
        return f"{POD}.volumes[{len(spec['volumes']) - 1}].hostPath.path"

    def host_port(spec: dict[str, Any]) -> str:
        ports = spec["containers"][0].setdefault("ports", [])
        ports.append({"containerPort": 22, "hostPort": 2222})
        return f"{POD}.containers[0].ports[{len(ports) - 1}].hostPort"

    def container_resources(field: str, value: Any, suffix: str) -> Callable[[dict[str, Any]], str]:
        def add(spec: dict[str, Any]) -> str:
            spec["containers"][0].setdefault("resources", {})[field] = value
            return f"{POD}.containers[0].resources.{suffix}"

        return add

    return [
        ("resourceClaims", pod_field("resourceClaims", [{"name": "g", "resourceClaimTemplateName": "mine"}])),
        ("container claims", container_resources("claims", [{"name": "g"}], "claims")),
        ("MIG instance", container_resources("limits", {"nvidia.com/mig-1g.10gb": 1}, "limits")),
        ("time-sliced GPU", container_resources("requests", {"nvidia.com/gpu.shared": 1}, "requests")),
        ("hostNetwork", pod_field("hostNetwork", True)),
        ("hostPID", pod_field("hostPID", True)),
        ("hostIPC", pod_field("hostIPC", True)),
        ("serviceAccountName", pod_field("serviceAccountName", "deployer")),
        ("runtimeClassName", pod_field("runtimeClassName", "kata")),
        ("ephemeralContainers", pod_field("ephemeralContainers", [{"name": "e", "image": "e"}])),
        ("privileged", container_context("privileged", True)),
        ("procMount", container_context("procMount", "Unmasked")),
        ("capabilities", container_context("capabilities", {"add": ["SYS_ADMIN"]}, ".add[0]")),
        ("hostPath", host_path),
        ("hostPort", host_port),
    ]


@given(TEMPLATES, st.sampled_from(_mutations()))
def test_adding_any_forbidden_field_to_a_taken_template_gets_it_refused_at_that_field(
    asked: dict[str, Any], mutation: tuple[str, Callable[[dict[str, Any]], str]]
) -> None:
    assume(DEFAULT_POD_POLICY.violation(asked) is None)
    mutated = copy.deepcopy(asked)
    path = mutation[1](mutated["spec"])
    violation = DEFAULT_POD_POLICY.violation(mutated)
    assert violation is not None and violation.path == path, mutation[0]
    refused = Tenancy().refusal("q", "ns", 0, [], mutated)
    assert refused is not None and refused.reason == POD_POLICY_VIOLATION and refused.message.startswith(path)


def test_a_gpu_the_template_takes_for_itself_is_refused_even_at_the_privileged_level() -> None:
    privileged = PodPolicy(level=PodSecurityLevel.PRIVILEGED)
    claims = {"spec": {"containers": [{"name": "c", "image": "i"}], "resourceClaims": [{"name": "g"}]}}
    violation = privileged.violation(claims)
    assert violation is not None and violation.path == f"{POD}.resourceClaims"
    assert "spec.gpuShare" in violation.message("q", PodSecurityLevel.PRIVILEGED)
    init_mig = {
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"nvidia.com/mig-3g.40gb": 2}}}],
        }
    }
    violation = privileged.violation(init_mig)
    assert violation is not None and violation.path == f"{POD}.initContainers[0].resources.requests"
    whole = {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    assert privileged.violation(whole) is None
