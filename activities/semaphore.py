"""Activities of the launch semaphore: sending acquires, and finding holders that died.

Both need a Temporal client, so they are methods of `SemaphoreActivities`, built once per
worker with the client and the semaphore settings the worker was configured with. Every
worker that hosts a workflow calling `workflows.permits.acquire_permit` registers them,
as does the worker hosting `LaunchSemaphoreWorkflow`.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from orch.semaphore import (
    ACQUIRE_SIGNAL,
    FIND_CLOSED_HOLDERS_ACTIVITY,
    LAUNCH_SEMAPHORE_WORKFLOW,
    REQUEST_PERMIT_ACTIVITY,
    SA_LAUNCH_WAITING,
    AcquireRequest,
    LaunchSemaphoreInput,
    PermitRequest,
    SemaphoreSettings,
)

LAUNCH_WAITING = SearchAttributeKey.for_int(SA_LAUNCH_WAITING)
# Describe calls in flight at once during a sweep (up to 2,000 job-slot holders).
DESCRIBE_CONCURRENCY = 16


class SemaphoreActivities:
    def __init__(
        self,
        client: Client,
        settings: SemaphoreSettings | None = None,
        semaphore_task_queue: str | None = None,
    ) -> None:
        """`settings` are used only when this worker is the one that starts the
        semaphore; `semaphore_task_queue` defaults to the calling activity's queue."""
        self._client = client
        self._settings = settings or SemaphoreSettings()
        self._semaphore_task_queue = semaphore_task_queue

    @activity.defn(name=REQUEST_PERMIT_ACTIVITY)
    async def request_permit(self, permit: PermitRequest) -> int | None:
        """Signal-with-start: queues the acquire, starting the semaphore if none runs.
        Safe to retry: the semaphore ignores a request id it has seen.

        Returns about how many launches wait ahead (for the Web UI's current details):
        the semaphore's published ``OrchLaunchWaiting`` count, read by one describe before
        the signal. None for job slots, when the semaphore does not publish its counts or
        does not exist yet. A describe never waits on a worker, unlike a query, so a busy
        semaphore cannot slow the acquire down."""
        ahead = await self._launches_waiting(permit) if permit.request.kind == "launch" else None
        await self._client.start_workflow(
            LAUNCH_SEMAPHORE_WORKFLOW,
            LaunchSemaphoreInput(settings=self._settings),
            id=permit.semaphore_id,
            task_queue=self._semaphore_task_queue or activity.info().task_queue,
            start_signal=ACQUIRE_SIGNAL,
            start_signal_args=[permit.request],
            static_summary=f"launch semaphore: {self._settings.limits.launch} launch permits, "
                           f"{self._settings.limits.job} job slots",
        )
        return ahead

    async def _launches_waiting(self, permit: PermitRequest) -> int | None:
        try:
            described = await self._client.get_workflow_handle(permit.semaphore_id).describe()
        except RPCError:
            return None
        return described.typed_search_attributes.get(LAUNCH_WAITING)

    @activity.defn(name=FIND_CLOSED_HOLDERS_ACTIVITY)
    async def find_closed_permit_holders(self, holders: list[AcquireRequest]) -> list[str]:
        """Request ids of `holders` whose workflow is no longer running."""
        limit = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

        async def closed(holder: AcquireRequest) -> bool:
            async with limit:
                gone = await self._holder_closed(holder)
            activity.heartbeat()
            return gone

        # A holder with both a launch permit and a job slot is described once.
        chains = {(h.holder_id, h.holder_first_run_id): h for h in holders}
        verdicts = dict(
            zip(chains, await asyncio.gather(*(closed(h) for h in chains.values())), strict=True)
        )
        return [h.request_id for h in holders if verdicts[h.holder_id, h.holder_first_run_id]]

    async def _holder_closed(self, holder: AcquireRequest) -> bool:
        try:
            description = await self._client.get_workflow_handle(holder.holder_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return True
            raise
        if description.status != WorkflowExecutionStatus.RUNNING:
            return True
        # Servers that report the run chain's first run id let us tell a later workflow
        # that reuses the holder's id from the holder itself.
        first_run_id = description.raw_description.workflow_execution_info.first_run_id
        return bool(first_run_id) and first_run_id != holder.holder_first_run_id
