"""The records of jobs on a cluster that cross between the control plane and a head:
what to run (:class:`JobSpec`, uploaded by the submit activity), a job's state
(:class:`JobRecord`) and one read of it for the managed-job watch (:class:`JobPoll`).

The head keeps them in its job table (``orch.runtime.jobs``, which also imports this
module on the nodes, so nothing here may import more than pydantic and orch's small
pure modules at run time).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from orch.secret import Secret
from orch.status import JobStatus

if TYPE_CHECKING:  # not imported on the nodes, which only read specs
    from orch.clouds.base import ClusterInfo
    from orch.spec import Task

WORKDIR = "~/sky_workdir"  # SkyPilot's name, so tasks written for it find their files
DEFAULT_CPUS_PER_NODE = 0.5  # a job's bundle on each node when the task names no CPUs
SECRETS_ENV = "ORCH_JOB_SECRETS"  # how ``submit`` gets a job's secrets (orch.runtime.jobs)


class JobSpec(BaseModel):
    """What the driver runs; written by the submit activity, read on the head."""

    id: int
    name: str | None = None
    run: str
    envs: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, Secret] = Field(default_factory=dict)  # over envs; see the docstring
    num_nodes: int = 1
    cluster_ips: list[str]  # every node of the cluster, head first: ranks follow this order
    cluster_name: str
    cpus_per_node: float = DEFAULT_CPUS_PER_NODE
    workdir: str | None = None  # on every node, e.g. ~/sky_workdir
    gcs_address: str

    @classmethod
    def for_task(cls, task: Task, job_id: int, cluster_name: str, info: ClusterInfo,
                 gcs_address: str, extra_envs: dict[str, str] | None = None) -> JobSpec:
        """Job ``job_id``: ``task``'s run command on the cluster ``info`` describes, in
        the synced workdir, with the task's envs (and ``extra_envs`` over them)."""
        return cls(
            id=job_id, name=task.name, run=task.run or "",
            envs={**task.envs, **(extra_envs or {})}, secrets=task.secrets,
            num_nodes=task.num_nodes,
            cluster_ips=[node.internal_ip for node in info.nodes], cluster_name=cluster_name,
            cpus_per_node=task.resources.min_cpus() or DEFAULT_CPUS_PER_NODE,
            workdir=WORKDIR, gcs_address=gcs_address,
        )


class JobRecord(BaseModel):
    id: int
    name: str | None = None
    status: JobStatus
    submitted_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    driver_pid: int | None = None
    message: str | None = None

    @property
    def duration_s(self) -> float | None:
        if not self.started_at:
            return None
        end = self.ended_at or datetime.now(UTC)
        return round((end - self.started_at).total_seconds(), 1)


class JobPoll(BaseModel):
    """One read of a job for a watcher: its record and the next piece of its log."""

    record: JobRecord | None
    offset: int  # where the next read starts (bytes into run.log)
    chunk_b64: str = ""  # the log bytes read, base64 (exact bytes, whatever the encoding)
    eof: bool = True  # the chunk reaches the end of what the log holds now

    @property
    def chunk(self) -> bytes:
        return base64.b64decode(self.chunk_b64)
