"""Operator settings: one typed, validated object, read from AISCHED_* environment variables.

Built once at start-up (`Settings()`) and passed to whatever needs it; nothing
reads the environment anywhere else.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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


class TopologyLabels(BaseSettings):
    """Node label keys of each topology level, tightest first."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_TOPOLOGY_", extra="forbid")

    node: str = Field(default="kubernetes.io/hostname", description="One host.")
    nvlink_domain: str = Field(
        default="nvidia.com/gpu.clique",
        description="NVLink domain (GPU Feature Discovery labels multi-node NVLink cliques so).",
    )
    rack: str = Field(
        default="aisched.io/rack",
        description="Rack or network block; e.g. cloud.google.com/gce-topology-block on GKE, "
        "topology.k8s.aws/network-node-layer-3 on EKS.",
    )
    zone: str = Field(default="topology.kubernetes.io/zone", description="Availability zone.")


class Settings(BaseSettings):
    """Everything the operator can be told at start-up."""

    model_config = SettingsConfigDict(env_prefix="AISCHED_", env_nested_delimiter="__", extra="forbid")

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty watches the whole cluster."
    )
    metrics_port: int = Field(default=8080, ge=1, le=65535, description="Prometheus /metrics port.")
    health_port: int = Field(default=8081, ge=1, le=65535, description="Liveness probe port.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    peering_name: str = Field(
        default="aisched",
        description="kopf peering object: operator replicas with the same name never act at once.",
    )
    default_queue: str = Field(default="default", description="Queue for jobs that name none.")
    gpu_resource: str = Field(default="nvidia.com/gpu", description="Extended resource of a GPU.")
    gpu_product_label: str = Field(
        default="nvidia.com/gpu.product", description="Node label naming the GPU product."
    )
    topology: TopologyLabels = Field(default_factory=TopologyLabels)
    spot_labels: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_SPOT_LABELS),
        description="Node label key -> value that marks spot capacity.",
    )
    interruption_taints: list[str] = Field(
        default_factory=lambda: list(DEFAULT_INTERRUPTION_TAINTS),
        description="Taint keys that announce a node's imminent loss.",
    )
    spot_notice_seconds: int = Field(
        default=120,
        ge=5,
        le=3600,
        description="Warning a spot node gives before it goes (AWS 120 s, GCP and Azure 30 s).",
    )
    resync_seconds: float = Field(
        default=15.0, gt=0, le=3600, description="Period of the reconcile timer per job."
    )

    @field_validator("namespaces")
    @classmethod
    def _no_blank_namespaces(cls, value: list[str]) -> list[str]:
        if any(not ns.strip() for ns in value):
            raise ValueError("namespaces must not contain blank names")
        return value
