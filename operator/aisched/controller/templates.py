"""What the controllers keep of a TrainingJob's or an InferenceService's pod template between the
watch event and the pods it makes.

The operator holds every such object of the cluster; a tenant's template may be a MiB
and more of JSON (etcd stores objects up to 1.5 MiB), ten times that once parsed, and
kept for each job it was most of the operator's memory (issue #27: a hundred such jobs,
1 GiB). Only the launch reads a container's environment, arguments and probes: a large
template is kept without them (and without the nested pod-spec fields only the pods need:
affinity, DNS settings, volume sources beyond their kind), and the launch reads the object
again from the API server.
A template of a usual size is kept whole, and launches with no extra read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from aisched.policy.pod_policy import APPARMOR_ANNOTATION, SECCOMP_ANNOTATIONS

# A template up to this much JSON is kept whole: templates people write are a few KiB.
KEPT_TEMPLATE_BYTES: Final = 16 * 1024
# What the record keeps of a large template's containers: what policy reads (image, resources,
# ports, mounts, security context), not what configures the process (env, args, probes...), which
# only the worker pods need; nor a field Kubernetes does not know, which no pod would carry.
KEPT_CONTAINER_FIELDS: Final = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "resources",
        "resizePolicy",
        "ports",
        "volumeMounts",
        "volumeDevices",
        "securityContext",
        "restartPolicy",
    }
)
# The nested fields of a PodSpec something reads before the launch (the queue's pod policy, the
# placement): a large template keeps these and every scalar field. Not affinity, DNS settings, host
# aliases, spread constraints and the like, which only the pods need: Kubernetes' schema bounds each
# list, but their product lets 1.4 MB of them parse to several MiB (benchmarks/tenant_objects.py).
KEPT_NESTED_POD_FIELDS: Final = frozenset(
    {
        "containers",
        "initContainers",
        "ephemeralContainers",
        "securityContext",
        "tolerations",
        "nodeSelector",
        "volumes",
        "resourceClaims",
    }
)
KEPT_METADATA_FIELDS: Final = frozenset({"labels"})
POLICY_ANNOTATIONS: Final = (APPARMOR_ANNOTATION, *SECCOMP_ANNOTATIONS)


def elided(obj: dict[str, Any]) -> dict[str, Any] | None:
    """OBJ with its template's process settings left out, when the template is large; None to keep it whole."""
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict) or template_bytes(template) <= KEPT_TEMPLATE_BYTES:
        return None
    kept: dict[str, Any] = {}
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        kept["metadata"] = {k: v for k, v in metadata.items() if k in KEPT_METADATA_FIELDS}
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            # The queue's pod policy reads the AppArmor and seccomp annotations: kept, so that a
            # large template cannot slip an unconfined profile past it.
            kept["metadata"]["annotations"] = {
                k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(POLICY_ANNOTATIONS)
            }
    pod_spec = template.get("spec")
    if isinstance(pod_spec, dict):
        kept["spec"] = {
            k: v for k, v in pod_spec.items() if k in KEPT_NESTED_POD_FIELDS or not isinstance(v, dict | list)
        }
        volumes = pod_spec.get("volumes")
        host_paths = (
            {v.get("name") for v in volumes if isinstance(v, dict) and "hostPath" in v}
            if isinstance(volumes, list)
            else set()
        )
        reads = _PolicyReads(host_paths)
        for kind in ("initContainers", "containers"):  # the order the pod policy reads them in
            if kind in pod_spec:
                kept["spec"][kind] = _kept_containers(pod_spec[kind], reads)
        if "volumes" in pod_spec:
            kept["spec"]["volumes"] = _kept_volumes(pod_spec["volumes"])
    assert isinstance(spec, dict)  # a template was found in it
    # Made anew, sharing no string or dict with the watch's parse: the allocator gives a parse's
    # memory back (20 MiB for the largest) only once nothing in it is left alive. Ten such jobs
    # parsed as a page left 83 MiB behind when the record kept pieces of them, 12 MiB when not.
    fresh: dict[str, Any] = json.loads(json.dumps({**obj, "spec": {**spec, "template": kept}}, default=str))
    return fresh


def template_bytes(template: dict[str, Any]) -> int:
    """The template's size as compact JSON, as etcd stores it (near enough)."""
    return len(json.dumps(template, separators=(",", ":"), ensure_ascii=False, default=str))


@dataclass
class _PolicyReads:
    """What the pod policy has been kept of so far in one template, in the order it reads containers
    (init containers first): it refuses a template on its first host port, the first writable mount
    of each hostPath volume and the first use of each capability added; the repeats change nothing,
    and the rest of those lists is the pods' business."""

    host_paths: set[Any]
    host_port: bool = False
    mounted: set[Any] = field(default_factory=set)
    capabilities: set[Any] = field(default_factory=set)

    def ports(self, ports: list[Any]) -> list[Any]:
        kept = []
        for port in ports:
            if not isinstance(port, dict):
                kept.append(port)
            elif port.get("hostPort") and not self.host_port:
                self.host_port = True
                kept.append({k: port[k] for k in ("containerPort", "hostPort") if k in port})
        return kept

    def mounts(self, mounts: list[Any]) -> list[Any]:
        kept = []
        for mount in mounts:
            if not isinstance(mount, dict):
                kept.append(mount)
                continue
            name = mount.get("name")
            if name in self.host_paths and mount.get("readOnly") is not True and name not in self.mounted:
                self.mounted.add(name)
                kept.append({k: mount[k] for k in ("name", "mountPath") if k in mount})
        return kept

    def security_context(self, context: dict[str, Any]) -> dict[str, Any]:
        capabilities = context.get("capabilities")
        if not isinstance(capabilities, dict):
            return context
        kept = dict(capabilities)
        if isinstance(drop := capabilities.get("drop"), list):
            kept["drop"] = ["ALL"] if "ALL" in drop else []  # the restricted level asks only that
        if isinstance(add := capabilities.get("add"), list):
            kept["add"] = [name for name in add if self._first(name)]
        return {**context, "capabilities": kept}

    def _first(self, capability: Any) -> bool:
        if not isinstance(capability, str):
            return True
        if capability in self.capabilities:
            return False
        self.capabilities.add(capability)
        return True


def _kept_containers(containers: Any, reads: _PolicyReads) -> Any:
    """Each container's policy fields, and of those only what the pod policy reads (READS). The bounds
    let a template hold 4,096 mounts and 2,048 ports and capabilities, some 200 bytes each once
    parsed: kept, they made a job cost 3 MiB (benchmarks/tenant_records.py). A refusal of a large
    template names its field by the index in what was kept."""
    if not isinstance(containers, list):
        return containers
    kept = []
    for container in containers:
        if not isinstance(container, dict):
            kept.append(container)
            continue
        fields = {k: v for k, v in container.items() if k in KEPT_CONTAINER_FIELDS}
        if isinstance(ports := fields.get("ports"), list):
            fields["ports"] = reads.ports(ports)
        if isinstance(mounts := fields.get("volumeMounts"), list):
            fields["volumeMounts"] = reads.mounts(mounts)
        if isinstance(context := fields.get("securityContext"), dict):
            fields["securityContext"] = reads.security_context(context)
        kept.append(fields)
    return kept


def _kept_volumes(volumes: Any) -> Any:
    """Each volume's name and kind, as the pod policy reads them; of a hostPath, its path and type too."""
    if not isinstance(volumes, list):
        return volumes
    kept = []
    for volume in volumes:
        if not isinstance(volume, dict):
            kept.append(volume)
            continue
        source: dict[str, Any] = {k: ({} if k != "name" else v) for k, v in volume.items()}
        host_path = volume.get("hostPath")
        if isinstance(host_path, dict):
            source["hostPath"] = {k: v for k, v in host_path.items() if k in ("path", "type")}
        kept.append(source)
    return kept
