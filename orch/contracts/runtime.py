"""The node-side activities' contract: their names, and the records they take and return
(``activities/runtime.py`` implements them; workflows call them by these names)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from orch.clouds.base import ClusterInfo, NodeInfo
from orch.contracts.staging import StagedFiles
from orch.runtime.job_records import JobSpec
from orch.secret import Secret

WAIT_FOR_NODES = "wait_for_nodes"
SETUP_RUNTIME = "setup_runtime"
START_RAY = "start_ray"
SYNC_FILES = "sync_files"
RUN_SETUP = "run_setup"
SUBMIT_JOB = "submit_job"
RAY_HEALTHY = "ray_healthy"
JOBS_ACTIVITY = "jobs_activity"
HEAD_JOBS = "head_jobs"
STOP_RAY = "stop_ray"


class NodesRequest(BaseModel):
    info: ClusterInfo
    timeout_s: float = 600


class StartRayRequest(BaseModel):
    info: ClusterInfo


class SyncRequest(BaseModel):
    """The task's workdir and file mounts to copy to every node: from the staging store
    when ``staged`` (orch.staging), else (a history from before staging) from these paths
    on the worker's own disk."""

    info: ClusterInfo
    workdir: str | None = None
    file_mounts: dict[str, str] = Field(default_factory=dict)
    staged: StagedFiles | None = None


class SetupRequest(BaseModel):
    info: ClusterInfo
    cluster_name: str
    setup: str
    envs: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, Secret] = Field(default_factory=dict)  # exported over envs
    job_id: int | None = None
    job_name: str | None = None


class SubmitRequest(BaseModel):
    head: NodeInfo
    spec: JobSpec


class HealthRequest(BaseModel):
    info: ClusterInfo
    gcs_address: str


class HeadJobsRequest(BaseModel):
    """Read the head's job table, after cancelling ``cancel`` (or every job)."""

    head: NodeInfo
    cancel: list[int] = Field(default_factory=list)
    cancel_all: bool = False


class JobsActivity(BaseModel):
    active: bool  # a job is pending or running
    last_activity_at: datetime | None = None  # the latest submission or end
