"""A cluster's own job's output, read from the staging store (``orch.job_output``): what
``orch launch`` and ``orch exec`` follow and ``orch logs`` prints, with no way to the
head from this machine.

The output gets there through the job's copier, ``JobOutputWorkflow`` on a worker
(``workflows/job_output.py``), which this module starts when it wants the output: once
per job (its id is the job's), so a second reader shares the first one's copy, and a
finished copier is not started again (the store has all it copied). The reader follows
the store until the copier ended, then reads once more: the copier stores the rest
before it ends.

A job nobody asked the output of while it ran (``orch launch -d``) is copied when
first asked, from the head's log, as long as the cluster is there. ``--no-follow`` on
such a job waits up to :data:`FIRST_COPY_WAIT_S` for the copier's first copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from orch.client.following import OrchError
from orch.contracts.watch import WatchRequest
from orch.job_output import (
    JOB_OUTPUT_WORKFLOW,
    OutputReader,
    cluster_job_key,
    cluster_job_output,
    job_output_workflow_id,
)
from orch.records import ClusterRecord
from orch.runtime.job_records import JobRecord

FOLLOW_POLL_S = 0.5
FIRST_COPY_WAIT_S = 15.0


def copier_request(record: ClusterRecord, job: JobRecord) -> WatchRequest:
    """What the copier of ``job`` on the cluster of ``record`` watches."""
    info, placement = record.info, record.placement
    if info is None or info.head is None or placement is None:
        raise OrchError(f"cluster {record.name} has no head node yet ({record.status})")
    # The copier ends with the job: whether a failed job's cluster is whole is the
    # cluster's business (its refresh), so no grace before that check.
    return WatchRequest(job_id=0, task_index=0, attempt=0,
                        cluster_output_key=cluster_job_key(record.cloud_name, job),
                        cluster_name=record.name, name_on_cloud=record.cloud_name,
                        cloud=placement.cloud, region=placement.region, head=info.head,
                        num_nodes=len(info.nodes), cluster_job_id=job.id,
                        failure_grace_s=0.0)


async def _copier(temporal: TemporalClient, task_queue: str, record: ClusterRecord,
                  request: WatchRequest) -> WorkflowHandle:
    """The job's copier, started unless it runs or ran."""
    workflow_id = job_output_workflow_id(record.name, request.cluster_output_key)
    try:
        handle = await temporal.start_workflow(
            JOB_OUTPUT_WORKFLOW, request, id=workflow_id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=f"output of job {request.cluster_job_id} on {record.name}, "
                           "to the staging store")
    except WorkflowAlreadyStartedError:  # it ran and ended: the store has its copy
        return temporal.get_workflow_handle(workflow_id)
    return handle


async def _copying(handle: WorkflowHandle) -> tuple[bool, bool]:
    """Whether the copier runs, and whether it started too recently to have copied."""
    description = await handle.describe()
    age = (datetime.now(UTC) - description.start_time).total_seconds()
    return description.status == WorkflowExecutionStatus.RUNNING, age < FIRST_COPY_WAIT_S


async def print_cluster_job_output(
    temporal: TemporalClient, task_queue: str, record: ClusterRecord, job: JobRecord,
    follow: bool, on_line: Callable[[str], None],
) -> None:
    """Give ``job``'s output to ``on_line``, a line at a time; with ``follow``, until
    the job ended (module docstring)."""
    request = copier_request(record, job)
    handle = await _copier(temporal, task_queue, record, request)
    reader = OutputReader(cluster_job_output(request.cluster_output_key), on_line)
    while True:
        running, fresh = await _copying(handle)
        got = await asyncio.to_thread(reader.read_new)
        if not running or not (follow or (fresh and not got)):
            break
        await asyncio.sleep(FOLLOW_POLL_S)
    reader.finish()
