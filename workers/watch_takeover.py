"""A worker that starts takes over the job watches its host's dead worker held: managed
jobs' and the output copiers of clusters' own jobs (``workflows/job_output.py``, which an
``orch launch`` following its job waits on).

The server retries a watch whose worker died only at the watch's heartbeat timeout
(``WATCH_CALL`` in ``workflows/options.py``: minutes, because every running job's
heartbeats are a steady cost of the server). A worker restarted on the same host
(``orch`` restarts the embedded one on its next command; a service manager restarts a
production one) need not wait that long: at start it lists the running managed jobs and
copiers, and every watch whose last
worker was a process of this host that no longer exists is failed on that worker's behalf,
with its last heartbeat details, so that the server retries it at once (the watch's retry
policy), and the retry resumes from those details. Watches of other hosts' workers are
left to their heartbeat timeout: from here a process elsewhere cannot be told dead.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowExecution
from temporalio.exceptions import ApplicationError

from orch.contracts.watch import WATCH_JOB
from orch.job_output import JOB_OUTPUT_WORKFLOW
from orch.records import MANAGED_JOB_WORKFLOW
from workers.health import local_worker

log = logging.getLogger(__name__)

DESCRIBE_CONCURRENCY = 20


def _orphaned(identity: str) -> bool:
    """Whether ``identity`` (pid@host) names a process of this host that is gone."""
    return identity.partition("@")[2] == socket.gethostname() and not local_worker(identity)


async def _take_over(client: Client, execution: WorkflowExecution) -> int:
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    description = await handle.describe()
    taken = 0
    for pending in description.raw_description.pending_activities:
        if (pending.activity_type.name != WATCH_JOB
                or pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                or not _orphaned(pending.last_worker_identity)):
            continue
        details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        await client.get_async_activity_handle(
            workflow_id=execution.id, run_id=execution.run_id,
            activity_id=pending.activity_id,
        ).fail(ApplicationError(f"its worker {pending.last_worker_identity} is gone",
                                type="WorkerGone"),
               last_heartbeat_details=details)
        taken += 1
    return taken


async def take_over_orphaned_watches(client: Client) -> int:
    """Fail, for an immediate retry, the running watches of this host's dead workers;
    returns how many. Errors are logged, never raised: this only saves time."""
    limit = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def one(execution: WorkflowExecution) -> int:
        async with limit:
            try:
                return await _take_over(client, execution)
            except Exception as exc:  # noqa: BLE001 - a job ended meanwhile, a busy server
                log.info("watch of %s not taken over: %s", execution.id, exc)
                return 0

    query = (f"(WorkflowType = '{MANAGED_JOB_WORKFLOW}' OR WorkflowType = "
             f"'{JOB_OUTPUT_WORKFLOW}') AND ExecutionStatus = 'Running'")
    try:
        executions = [e async for e in client.list_workflows(query)]
    except Exception as exc:  # noqa: BLE001
        log.warning("could not list the running job watches: %s", exc)
        return 0
    taken = sum(await asyncio.gather(*(one(e) for e in executions)))
    if taken:
        log.info("took over %d job watch(es) of a worker of this host that is gone", taken)
    return taken
