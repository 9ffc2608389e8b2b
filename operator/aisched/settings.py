"""Operator settings: one typed, validated object, read from AISCHED_* environment variables.

Built once at start-up (`Settings()`) and passed to whatever needs it; nothing
reads the environment anywhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from aisched.policy.scheduler import ADMISSIONS_PER_CYCLE
from aisched.policy.scheduler.service import FIRST_BAND_GPU_SECONDS
from aisched.policy.topology import PRESETS, LevelKey, Topology
from aisched.policy.workloads.model import WorkloadKind

# Taints that clouds and their node managers put on a node shortly before it
# goes away. Keys only: the values differ between versions of each tool.
DEFAULT_INTERRUPTION_TAINTS = (
    "aws-node-termination-handler/spot-itn",  # AWS Node Termination Handler, spot notice
    "aws-node-termination-handler/rebalance-recommendation",
    "karpenter.sh/disrupted",  # Karpenter v1 (and karpenter.sh/disruption before it)
    "karpenter.sh/disruption",
    "cloud.google.com/impending-node-termination",  # GKE graceful node shutdown
)

# Node labels that mark spot capacity, with the value that means "spot".
DEFAULT_SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}


class TopologyLevelSetting(BaseModel):
    """One topology level: the name jobs use in `topology.requiredLevel` and the node label it reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="What jobs call the level (Rack, Block, NVLinkDomain, ...).")
    node_label: str = Field(
        validation_alias=AliasChoices("nodeLabel", "node_label"),
        description="The node label whose value names a node's domain at this level.",
    )


class TopologySettings(BaseSettings):
    """The cluster's topology levels: a preset, or levels of one's own (aisched.policy.topology)."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_TOPOLOGY_", extra="forbid")

    preset: Literal["nvidia", "aws", "gke", "local"] = Field(
        default="nvidia",
        description="nvidia: Zone, NVLinkDomain (nvidia.com/gpu.clique), the labels every cloud and GPU Feature "
        "Discovery set; aws: Zone, NetworkLayer1-3 (topology.k8s.aws/network-node-layer-1..3), NVLinkDomain; gke: "
        "Zone, Block, Subblock, NVLinkDomain, Host (cloud.google.com/gce-topology-*); local: Zone, Rack "
        "(aisched.io/rack), NVLinkDomain, as "
        "the local cluster labels its nodes. The node itself is always the level Node.",
    )
    levels: list[TopologyLevelSetting] = Field(
        default_factory=list,
        description='Levels of one\'s own, widest first, as JSON ([{"name": "Rack", "nodeLabel": "..."}]); '
        "when given they replace the preset's.",
    )

    @field_validator("levels")
    @classmethod
    def _levels_make_a_topology(cls, levels: list[TopologyLevelSetting]) -> list[TopologyLevelSetting]:
        # A clash of names or labels, or a name jobs cannot write, is refused at start-up.
        Topology([LevelKey(level.name, level.node_label) for level in levels])
        return levels

    def resolved(self) -> Topology:
        if not self.levels:
            return Topology(PRESETS[self.preset])
        return Topology([LevelKey(level.name, level.node_label) for level in self.levels])


# Board power (TDP) of common data-centre GPUs, in watts, keyed by the product name
# GPU Feature Discovery puts in nvidia.com/gpu.product; used when DCGM gives no energy.
DEFAULT_GPU_POWER_WATTS = {
    "NVIDIA-H200": 700.0,
    "NVIDIA-H100-80GB-HBM3": 700.0,
    "NVIDIA-A100-SXM4-80GB": 400.0,
    "NVIDIA-A100-SXM4-40GB": 400.0,
    "NVIDIA-A100-PCIE-40GB": 250.0,
    "NVIDIA-A100-80GB-PCIe": 300.0,
    "NVIDIA-L40S": 350.0,
    "NVIDIA-L4": 72.0,
    "NVIDIA-A10G": 300.0,
    "Tesla-V100-SXM2-16GB": 300.0,
    "Tesla-T4": 70.0,
}


class CarbonSettings(BaseSettings):
    """Where carbon intensity comes from, and how to estimate a job's power draw."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_CARBON_", extra="forbid")

    provider: Literal["none", "electricitymaps", "watttime", "nationalgrid", "prometheus", "file"] = Field(
        default="none", description="Carbon intensity source; none starts deferrable jobs at once."
    )
    region: str = Field(
        default="GB",
        description="Grid region: an Electricity Maps zone (DE), a WattTime region (CAISO_NORTH), "
        "GB or a GB region id 1-17 for the National Grid API, or the {region} in the Prometheus query.",
    )
    forecast_horizon_seconds: int = Field(
        default=48 * 3600, ge=3600, le=14 * 86400, description="How far ahead to ask for a forecast."
    )
    electricitymaps_url: str = Field(default="https://api.electricitymap.org/v3", description="API base URL.")
    watttime_url: str = Field(default="https://api.watttime.org/v3", description="API base URL.")
    watttime_login_url: str = Field(
        default="https://api.watttime.org/login", description="Login URL (HTTP basic auth, returns a token)."
    )
    watttime_username: str | None = Field(default=None, description="WattTime user; the password is in the key file.")
    watttime_signal_type: str = Field(default="co2_moer", description="WattTime signal (marginal CO2 rate).")
    nationalgrid_url: str = Field(default="https://api.carbonintensity.org.uk", description="API base URL.")
    api_key_file: Path | None = Field(
        default=None,
        description="File holding the Electricity Maps token or the WattTime password, mounted from a Secret; "
        "read on every login so a rotated Secret takes effect without a restart.",
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=300, description="Per-request timeout.")
    retries: int = Field(default=3, ge=0, le=10, description="Retries after a timeout, 429 or 5xx.")
    backoff_seconds: float = Field(default=0.5, ge=0, le=60, description="First retry delay; doubles each time.")
    fetch_deadline_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Deadline of one fetch, its retries included; it also ends a source that drips its "
        "answer slowly enough to pass every per-request timeout.",
    )
    answer_wait_seconds: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="How long the loop waits for a fetch when it has no answer in memory at all; past it the "
        "loop goes on without carbon (deferrable jobs start in time) and the fetch goes on beside it.",
    )
    forecast_pending_seconds: float = Field(
        default=120.0,
        ge=0,
        le=3600,
        description="How long a deferrable job waits for a zone's forecast that is being read for the first time "
        "(a restarted operator, a zone never asked before) and has not failed, before it is planned without one; "
        "never past its latest start. A running job's chunk end waits as long before it runs on to completion.",
    )
    circuit_failures: int = Field(
        default=3, ge=1, le=100, description="Failed fetches in a row that open the circuit: the source is not asked."
    )
    circuit_open_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="How long an open circuit keeps the source from being asked; doubled after each failed "
        "trial, up to 15 times as long.",
    )
    cache_ttl_seconds: float = Field(default=300.0, ge=0, le=86400, description="How long a fetched answer is reused.")
    max_stale_seconds: float = Field(
        default=6 * 3600.0,
        ge=0,
        le=7 * 86400,
        description="While the source fails, keep using its last answer for this long.",
    )
    file_path: Path | None = Field(
        default=None, description="CSV of time,intensity (gCO2eq/kWh) for provider file, e.g. a mounted ConfigMap."
    )
    prometheus_url: str | None = Field(default=None, description="Prometheus base URL for provider prometheus.")
    prometheus_query: str = Field(
        default='grid_carbon_intensity_grams_per_kwh{region="{region}"}',
        description="PromQL giving gCO2eq/kWh; {region} is replaced by the region.",
    )
    prometheus_step_seconds: int = Field(default=1800, ge=60, le=86400, description="query_range step.")
    gpu_power_watts: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_GPU_POWER_WATTS),
        description="Power per GPU by product name, when DCGM energy counters are not available.",
    )
    default_gpu_power_watts: float = Field(default=400.0, gt=0, le=5000, description="Power of a GPU not listed.")
    forecast_error: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Typical forecast error as a fraction of mean intensity; the planner discounts forecast "
        "lows by it (0 trusts the forecast fully).",
    )
    min_saving_fraction: float = Field(
        default=0.0, ge=0, le=1, description="Defer only when the forecast promises at least this saving."
    )
    min_chunk_seconds: int = Field(
        default=1800,
        ge=1,
        le=86400,
        description="Shortest chunk an interruptible job is split into; each chunk after the first costs "
        "a checkpoint and a restart (restartOverheadSeconds).",
    )
    emissions_period_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="How often a running job's estimated emissions (status.estimatedEmissionsGrams) are "
        "added up from its GPUs' power and the grid intensity seen.",
    )

    dcgm_prometheus_url: str | None = Field(
        default=None,
        description="Prometheus that scrapes NVIDIA's DCGM exporter (with its pod mapping on). Set, a running "
        "job's emissions come from the energy its GPUs used (dcgmEnergyCounter); where the counter has no "
        "series for the job's pods, from gpuPowerWatts.",
    )
    dcgm_energy_counter: str = Field(
        default="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        description="DCGM exporter's per-GPU energy counter, in millijoules; its pod and namespace labels "
        "are the autoscaler's gpuPodLabel and gpuNamespaceLabel.",
    )

    def power_per_gpu(self, product: str | None) -> float:
        """Watts drawn by one GPU of this product (the default for unknown ones)."""
        return self.gpu_power_watts.get(product or "", self.default_gpu_power_watts)


class AutoscalerSettings(BaseSettings):
    """Where the InferenceService autoscaler reads its metric, how often, and what the series are called."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_AUTOSCALER_", extra="forbid")

    prometheus_url: str | None = Field(
        default=None,
        description="Prometheus HTTP API base URL (or Thanos, Mimir, VictoriaMetrics); unset, autoscaled "
        "services hold their replica count.",
    )
    interval_seconds: float = Field(
        default=15.0, gt=0, le=600, description="How often each autoscaled service is evaluated (HPA's default)."
    )
    query_timeout_seconds: float = Field(default=5.0, gt=0, le=60, description="Per-query timeout.")
    metric_max_age_seconds: float = Field(
        default=120.0, gt=0, le=3600, description="A sample older than this counts as missing: the count holds."
    )
    request_counter: str = Field(
        default="http_requests_total",
        description="Per-pod counter of requests served, for RequestsPerSecond (vLLM: vllm:request_success_total).",
    )
    concurrency_gauge: str = Field(
        default="http_requests_in_flight",
        description="Per-pod gauge of requests in flight, for Concurrency (vLLM: vllm:num_requests_running).",
    )
    gpu_utilization: str = Field(
        default="DCGM_FI_DEV_GPU_UTIL", description="DCGM exporter's per-GPU utilisation, for GPUUtilization."
    )
    rate_window: str = Field(
        default="1m",
        pattern=r"^[0-9]+(ms|s|m|h)$",
        description="rate() range: at least four scrape intervals, short enough to follow a burst.",
    )
    namespace_label: str = Field(default="namespace", description="Label holding the pod's namespace.")
    pod_label: str = Field(default="pod", description="Label holding the pod's name.")
    gpu_namespace_label: str = Field(
        default="namespace", description="Namespace label on DCGM series (exported_namespace without honorLabels)."
    )
    gpu_pod_label: str = Field(
        default="pod", description="Pod label on DCGM series (exported_pod without honorLabels)."
    )


class ProvisioningSettings(BaseSettings):
    """Nodes for whole gangs from Karpenter (NodeClaims); off unless enabled."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_PROVISIONING_", extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Ask Karpenter for NodeClaims for whole waiting gangs (one zone, spot first); needs "
        "Karpenter's CRDs, the instance types file and RBAC on karpenter.sh nodeclaims and nodepools.",
    )
    instance_types_file: Path | None = Field(
        default=None,
        description="What nodes can be had: Karpenter's KWOK instance-types JSON format (name, resources with "
        "the GPU count, offerings with Price and In-requirements on capacity type, zone and GPU product).",
    )
    node_pools: dict[str, str] = Field(
        default={"Spot": "gpu-spot", "OnDemand": "gpu-on-demand"},
        description="The NodePool of each capacity type (Spot, OnDemand) that new NodeClaims belong to.",
    )
    node_class_group: str = Field(default="karpenter.kwok.sh", description="API group of the node class.")
    node_class_kind: str = Field(default="KWOKNodeClass", description="Kind of the node class (EC2NodeClass on AWS).")
    node_class_name: str = Field(default="default", description="Name of the node class new NodeClaims use.")
    boot_seconds: float = Field(
        default=300.0,
        ge=0,
        le=86_400,
        description="Expected time from asking to a Ready GPU node: no nodes for a gang that running jobs of "
        "known duration make room for sooner.",
    )


class Settings(BaseSettings):
    """Everything the operator can be told at start-up."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_", env_nested_delimiter="__", extra="forbid")

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty watches the whole cluster."
    )
    metrics_port: int = Field(default=8080, ge=1, le=65535, description="Prometheus /metrics port.")
    metrics_address: str = Field(
        default="0.0.0.0", description="Address /metrics listens on; 127.0.0.1 keeps it inside the pod."
    )
    health_port: int = Field(default=8081, ge=1, le=65535, description="Liveness probe port.")
    health_address: str = Field(
        default="0.0.0.0", description="Address /healthz listens on (the kubelet probes the pod's IP)."
    )
    liveness_pass_seconds: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="/healthz fails when the TrainingJob reconcile loop has completed no pass for this long "
        "(it passes at least every resyncSeconds), so the kubelet restarts an operator stuck inside a pass.",
    )
    api_qps: float = Field(
        default=200.0,
        gt=0,
        le=10_000,
        description="Kubernetes API requests per second once the burst is spent (client-go's QPS): the operator "
        "never floods the API server, whatever a burst of jobs asks of it. The default is what large clusters "
        "give kube-controller-manager and kube-scheduler (this project's local cluster included): a gang of "
        "pods costs a few requests each, as a Job's do.",
    )
    api_burst: int = Field(default=400, ge=1, le=100_000, description="API requests sent at once before the rate.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    leader_election: bool = Field(
        default=True, description="Hold a Lease before acting, so only one replica works at a time."
    )
    leader_namespace: str = Field(
        default="default",
        validation_alias=AliasChoices("AISCHED_LEADER_NAMESPACE", "POD_NAMESPACE"),
        description="Namespace of the leader Lease; the chart sets the operator's own namespace.",
    )
    leader_lease_name: str = Field(default="aisched-leader", description="Name of the leader Lease.")
    # client-go's defaults: a standby takes over at most lease + retry seconds after the leader stops.
    leader_lease_seconds: int = Field(default=15, ge=1, le=3600, description="How long a Lease holds unrenewed.")
    leader_renew_deadline_seconds: int = Field(
        default=10, ge=1, le=3600, description="The leader stops acting when it could not renew for this long."
    )
    leader_retry_seconds: float = Field(
        default=2.0, gt=0, le=600, description="Period of renewals, and of a standby's attempts to take the Lease."
    )
    api_request_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Deadline of each Kubernetes API request (watches excepted): a hung API server costs "
        "one reconcile this long, never a thread for good.",
    )
    relist_seconds: float = Field(
        default=300.0, gt=0, description="Full relist of nodes and pods, repairing anything a watch missed."
    )
    list_page_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Objects per page of every list (at start-up, each relist, a watch that starts over): "
        "each page is reduced to what placement needs before the next is read, so a large cluster is never "
        "held as JSON at once, and the API server serves it in bounded chunks (client-go's default page is 500).",
    )
    default_queue: str = Field(default="default", description="Queue for jobs that name none.")
    gpu_resource: str = Field(default="nvidia.com/gpu", description="Extended resource of a GPU.")
    worker_priority_class_name: str = Field(
        default="",
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
        description="PriorityClass of every worker and replica pod the operator creates (empty: none, so the "
        "cluster's global default). A template's own priorityClassName is refused: which tenant goes first is "
        "the queues' decision, and a class such as system-node-critical would let one preempt another's pods.",
    )
    gpu_product_label: str = Field(default="nvidia.com/gpu.product", description="Node label naming the GPU product.")
    topology: TopologySettings = Field(default_factory=TopologySettings)
    carbon: CarbonSettings = Field(default_factory=CarbonSettings)
    autoscaler: AutoscalerSettings = Field(default_factory=AutoscalerSettings)
    provisioning: ProvisioningSettings = Field(default_factory=ProvisioningSettings)
    spot_labels: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_SPOT_LABELS),
        description="Node label key -> value that marks spot capacity.",
    )
    interruption_taints: list[str] = Field(
        default_factory=lambda: list(DEFAULT_INTERRUPTION_TAINTS),
        description="Taint keys that announce a node's imminent loss.",
    )
    workload_kinds: list[WorkloadKind] = Field(
        default_factory=lambda: list(WorkloadKind),
        description="The other kinds whose workloads the operator schedules, by <plural>.<group> (pods: plain pod "
        "groups). The chart sets the kinds its admission policies hold (workloads.kinds), none where it "
        "installs no policy (workloads.enabled false, Kubernetes before 1.36): the operator then watches none.",
    )
    workload_pods_ready_seconds: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="How long an admitted workload of another kind (a Job, a PyTorchJob, a RayCluster) may take "
        "for its controller to make every GPU pod and for them to bind. Past it, the workload is stopped "
        "(suspended, its record dropped) and queued again after a backoff. A kind whose controller is not "
        "running, or pods that cannot bind, would otherwise hold their queue's quota for good.",
    )
    mig_whole_hold_down_seconds: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="How long a node sliced for MIG stays sliced once all its instances are free and no "
        "waiting MIG job needs them, before its MIG config is set back to whole GPUs (all-disabled); a "
        "whole-GPU gang waiting for GPUs sets it back at once. Short enough that one tenant's MIG jobs do not "
        "keep the cluster sliced for the others, long enough that a tenant's next MIG job finds its instances.",
    )
    spot_notice_seconds: int = Field(
        default=120,
        ge=5,
        le=3600,
        description="Warning a spot node gives before it goes (AWS 120 s, GCP and Azure 30 s).",
    )
    spot_prior_interruptions_per_hour: float = Field(
        default=0.15,
        ge=0,
        le=60,
        description="Interruptions per node-hour assumed for a capacity pool with no history yet "
        "(the AWS V100 spot traces of Can't Be Late show 0.10-0.18).",
    )
    spot_prior_weight_hours: float = Field(
        default=24.0,
        gt=0,
        le=100_000,
        description="Node-hours of a pool's own history it takes to outweigh that prior.",
    )
    restart_overhead_seconds: float = Field(
        default=300.0,
        ge=0,
        le=86400,
        description="What a gang (re)start costs before training moves again: scheduling, image pull, "
        "loading the checkpoint. Deadline planning keeps this much in reserve.",
    )
    test_exit_at_write: str = Field(
        default="",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?:[1-9][0-9]*)?$",
        description="Tests only: 'NAMESPACE:N' ends the operator just before its Nth API write in NAMESPACE.",
    )
    node_not_ready_grace_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long a node may be NotReady before its gangs are moved (a kubelet restart is a blip).",
    )
    resync_seconds: float = Field(default=15.0, gt=0, le=3600, description="Period of the reconcile timer per job.")
    reconciles_per_pass: int = Field(
        default=256,
        ge=1,
        le=100_000,
        description="Most objects reconciled in one pass of a controller's loop, the longest waiting first; the "
        "scheduling cycle runs after each pass, so a backlog of thousands never holds up admission for long.",
    )
    admissions_per_cycle: int = Field(
        default=ADMISSIONS_PER_CYCLE,
        ge=1,
        le=100_000,
        description="Most gangs one scheduling cycle admits; the jobs it did not reach go first in the next "
        "cycle, which follows once the last one's deciding time has passed again (at most 1 s). Each admission "
        "is a launch carried out before the next cycle.",
    )
    first_service_band_gpu_seconds: float = Field(
        default=FIRST_BAND_GPU_SECONDS,
        gt=0,
        le=1e9,
        description="GPU-seconds of attained service at which a job leaves the first band (later edges grow "
        "tenfold): among equal priorities a job of a lower band goes first and, in a time-slicing queue, may "
        "preempt one of a higher band to a checkpoint.",
    )
    events_per_second: float = Field(
        default=10.0,
        gt=0,
        le=1000,
        description="Rate at which Events are sent once a burst is spent; they queue meanwhile, so a burst of "
        "submissions never waits for its own Events.",
    )
    event_burst: int = Field(default=50, ge=1, le=10_000, description="Events sent at once before the rate applies.")

    @model_validator(mode="after")
    def _leader_timings_in_order(self) -> Settings:
        # Otherwise a leader could lose the Lease before it notices, and two replicas would act.
        if not self.leader_retry_seconds < self.leader_renew_deadline_seconds < self.leader_lease_seconds:
            raise ValueError(
                "leader election needs AISCHED_LEADER_RETRY_SECONDS < AISCHED_LEADER_RENEW_DEADLINE_SECONDS < "
                f"AISCHED_LEADER_LEASE_SECONDS, got {self.leader_retry_seconds} / "
                f"{self.leader_renew_deadline_seconds} / {self.leader_lease_seconds}"
            )
        return self

    @model_validator(mode="after")
    def _liveness_outlasts_a_resync(self) -> Settings:
        # An idle loop passes once a resync period; a bound below it would restart a healthy operator.
        if self.liveness_pass_seconds <= self.resync_seconds:
            raise ValueError(
                f"AISCHED_LIVENESS_PASS_SECONDS ({self.liveness_pass_seconds}) must exceed "
                f"AISCHED_RESYNC_SECONDS ({self.resync_seconds})"
            )
        return self

    @field_validator("namespaces")
    @classmethod
    def _no_blank_namespaces(cls, value: list[str]) -> list[str]:
        if any(not ns.strip() for ns in value):
            raise ValueError("must not contain blank names")
        return value


_MODELS: dict[str, type[BaseSettings]] = {
    model.__name__: model
    for model in (Settings, TopologySettings, CarbonSettings, AutoscalerSettings, ProvisioningSettings)
}


def _variable(model: type[BaseSettings], loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
    """The environment variable an error's location came from, and what is left of the location (a key, an index).

    A nested group is read two ways: by its own class (AISCHED_CARBON_REGION) and through the top-level
    object's nested delimiter (AISCHED_CARBON__REGION); the model that raised tells which.
    """
    prefix = str(model.model_config.get("env_prefix", ""))
    field = str(loc[0])
    annotation = model.model_fields[field].annotation if field in model.model_fields else None
    if isinstance(annotation, type) and issubclass(annotation, BaseSettings) and len(loc) > 1:
        return f"{prefix}{field}__{loc[1]}".upper(), loc[2:]
    return f"{prefix}{field}".upper(), loc[1:]


def _reason(message: str) -> str:
    for said, meant in (("Value error, ", ""), ("Input should be ", "must be ")):
        if message.startswith(said):
            return meant + message[len(said) :]
    return message[:1].lower() + message[1:]


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, default=str)


def describe_settings_error(error: ValidationError | SettingsError, environ: Mapping[str, str]) -> list[str]:
    """One line per problem, each naming the AISCHED_* variable to fix and the value it had.

    Settings are read from the environment, so pydantic's field names (resync_seconds) would send a
    person looking for a field they never wrote; the variable is what they set.
    """
    if isinstance(error, SettingsError):
        # pydantic-settings could not parse a JSON-valued variable (a list or a mapping) and names the field.
        match = re.search(r'field "([^"]+)"', str(error))
        field = match.group(1) if match else "*"
        nested = field in (
            "topology",
            "carbon",
            "autoscaler",
            "provisioning",
        )  # AISCHED_CARBON__...: which one, it does not say
        variable = f"AISCHED_{field.upper()}" + ("__*" if nested else "")
        cause = error.__cause__
        detail = f" ({cause})" if isinstance(cause, json.JSONDecodeError) else ""
        got = _lookup(environ, variable)
        return [f"{variable}: must be JSON{detail}" + (f" (got {_shown(got)})" if got is not None else "")]
    model = _MODELS.get(error.title, Settings)
    lines = []
    for problem in error.errors(include_url=False):
        if not problem["loc"]:
            # A rule across several variables (leader timings); its message names each of them.
            lines.append(_reason(problem["msg"]))
            continue
        variable, rest = _variable(model, tuple(problem["loc"]))
        where = "".join(f"[{_shown(part)}]" for part in rest)
        lines.append(f"{variable}{where}: {_reason(problem['msg'])} (got {_shown(problem['input'])})")
    return lines


def _lookup(environ: Mapping[str, str], variable: str) -> str | None:
    # pydantic-settings matches variable names without regard to case, as we do here.
    wanted = variable.upper()
    return next((value for name, value in environ.items() if name.upper() == wanted), None)
