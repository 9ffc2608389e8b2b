"""The one way a TrainingJob's status is written: a merge patch, then the store holds what landed.

Every part that decides something of a job (its reconcile, the scheduling cycle, the carbon
stages) writes through here, so the placement this process wrote and our copy of the object
always follow the write.
"""

from __future__ import annotations

from typing import Any

from aisched.api import TrainingJob
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.training.store import PLURAL, JobStore
from aisched.kube.client import KubeClient

# Jobs reconciled (or written) at once; a little under the API client's threads, leaving some to the
# serving loop.
CONCURRENT_RECONCILES = 24


class StatusWriter:
    def __init__(self, kube: KubeClient, store: JobStore) -> None:
        self._kube = kube
        self._store = store

    async def write(self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus) -> None:
        """STATUS written for JOB (read from OBJ), unless it is what the job has already."""
        if status == job.status:
            return
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        wire = status.to_wire()
        version = await self._kube.patch_status(PLURAL, namespace, name, wire)
        self._store.written(obj, status, version, wire)

    async def write_unreadable(self, obj: dict[str, Any], status: TrainingJobStatus) -> None:
        """STATUS written for an object the model refuses: only the status is ours to say anything in."""
        metadata = obj["metadata"]
        wire = status.to_wire()
        await self._kube.patch_status(PLURAL, metadata["namespace"], metadata["name"], wire)
        self._store.put((metadata["namespace"], metadata["name"]), {**obj, "status": wire})

    async def drop_chunk_end(self, job: TrainingJob) -> None:
        """Status writes are merge patches, which drop a field only when told so with a null."""
        if job.status.chunk_end is not None:
            namespace, name = job.metadata["namespace"], job.metadata["name"]
            await self._kube.patch_status(PLURAL, namespace, name, {"chunkEnd": None})
