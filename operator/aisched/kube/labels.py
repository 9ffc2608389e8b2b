"""Label, annotation and gate names the operator puts on what it creates."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "aisched.io"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
# The well-known node label a worker is pinned to its node by.
HOSTNAME: Final = "kubernetes.io/hostname"
JOB_NAME: Final = f"{PREFIX}/job-name"
JOB_KIND: Final = f"{PREFIX}/kind"
GANG_GENERATION: Final = f"{PREFIX}/gang-generation"
RANK: Final = f"{PREFIX}/rank"
# Gated pods are invisible to kube-scheduler; the gate comes off once every
# pod of the gang exists, so the gang binds together or not at all.
GANG_GATE: Final = f"{PREFIX}/gang"
# On every worker pod: the API server keeps a deleted worker until the operator has
# recorded the checkpoint it reported (policy/report_tracking.py), restarts included.
REPORT_FINALIZER: Final = f"{PREFIX}/checkpoint-report"
# On every worker: the queue its job was charged to when the pod was made. Its GPUs stay charged
# there while the pod lives on after its job was deleted (a long termination grace), so a job
# deleted and submitted again never holds its queue's quota twice.
QUEUE_ANNOTATION: Final = f"{PREFIX}/queue"
# Users annotate a deferred job with this to start it now.
START_NOW: Final = f"{PREFIX}/start-now"


def job_selector(kind: str, name: str) -> str:
    return f"{JOB_KIND}={kind},{JOB_NAME}={name}"
