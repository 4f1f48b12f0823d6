"""Signalling the bulk teardown (``orch.bulk_teardown``), and managed jobs their cancels,
from outside a workflow."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError, RPCStatusCode

from orch.bulk_teardown import (
    BULK_TEARDOWN_ID,
    BULK_TEARDOWN_SUMMARY,
    BULK_TEARDOWN_WORKFLOW,
    BulkTeardownInput,
)
from orch.managed_jobs import CANCEL_SIGNAL, CancelRequest


async def signal_bulk_teardown(temporal: TemporalClient, task_queue: str, signal: str,
                               argument: BaseModel) -> None:
    """Signal-with-start: the signal to the entity, started first if none runs."""
    await temporal.start_workflow(
        BULK_TEARDOWN_WORKFLOW, BulkTeardownInput(), id=BULK_TEARDOWN_ID,
        task_queue=task_queue, start_signal=signal, start_signal_args=[argument],
        static_summary=BULK_TEARDOWN_SUMMARY,
    )


async def signal_cancel(temporal: TemporalClient, job_workflow_id: str,
                        request: CancelRequest | None = None) -> bool:
    """The cancel signal to a managed job, with ``request`` when it says who sent it.
    False when the job had already ended."""
    handle = temporal.get_workflow_handle(job_workflow_id)
    try:
        if request is None:
            await handle.signal(CANCEL_SIGNAL)
        else:
            await handle.signal(CANCEL_SIGNAL, request)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
    return True


async def cancel_for_bulk_teardown(temporal: TemporalClient, job_workflow_id: str) -> bool:
    """A cancel on the bulk teardown's behalf: the job leaves its cluster in its result,
    for the entity to read (``CancelRequest``). False when the job had already ended (its
    result says what it left)."""
    return await signal_cancel(temporal, job_workflow_id,
                               CancelRequest(sent_by=BULK_TEARDOWN_ID))
