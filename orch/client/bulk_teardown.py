"""Signalling the bulk teardown (``orch.bulk_teardown``) from outside a workflow."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.client import Client as TemporalClient

from orch.bulk_teardown import (
    BULK_TEARDOWN_ID,
    BULK_TEARDOWN_SUMMARY,
    BULK_TEARDOWN_WORKFLOW,
    BulkTeardownInput,
)


async def signal_bulk_teardown(temporal: TemporalClient, task_queue: str, signal: str,
                               argument: BaseModel) -> None:
    """Signal-with-start: the signal to the entity, started first if none runs."""
    await temporal.start_workflow(
        BULK_TEARDOWN_WORKFLOW, BulkTeardownInput(), id=BULK_TEARDOWN_ID,
        task_queue=task_queue, start_signal=signal, start_signal_args=[argument],
        static_summary=BULK_TEARDOWN_SUMMARY,
    )
