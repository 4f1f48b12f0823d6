"""The managed-job watch's contract: its name, request and result
(``activities/managed_job.py``)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from orch.clouds.base import NodeInfo
from orch.managed_jobs import DEFAULT_POLL_S
from orch.status import JobStatus

WATCH_JOB = "watch_job"


class WatchRequest(BaseModel):
    """One job to watch on its cluster: a managed job's attempt (``job_id``,
    ``task_index`` and ``attempt`` name where its output goes), or, with
    ``cluster_output_key``, a cluster's own job, whose output goes under that key
    (``orch.job_output.cluster_job_key``; the other three are then 0)."""

    job_id: int  # the managed job (names the log file)
    task_index: int
    attempt: int
    cluster_output_key: str = ""
    cluster_name: str
    cloud: str
    region: str
    head: NodeInfo
    name_on_cloud: str = ""  # what the instances are tagged with; "": cluster_name
    num_nodes: int
    cluster_job_id: int  # the job's id on its cluster
    poll_interval_s: float = DEFAULT_POLL_S  # the longest a long poll waits on the head
    instance_check_s: float = 300.0  # cloud API calls: rare (a failed job or head checks too)
    unreachable_limit_s: float = 300.0
    # A job that ended other than SUCCEEDED waits this long before the cloud is asked
    # whether its cluster is whole: a preempted machine's shutdown signals the job before
    # its instance leaves RUNNING (SkyPilot's jobs controller waits 5 s for a failure).
    failure_grace_s: float = 5.0


class WatchOutcome(StrEnum):
    JOB_ENDED = "JOB_ENDED"
    CLUSTER_LOST = "CLUSTER_LOST"


class WatchResult(BaseModel):
    outcome: WatchOutcome
    job_status: JobStatus | None = None  # set when the job ended
    detail: str = ""
