"""Taking and giving back permits of the launch semaphore, from inside another workflow.

    permit = await acquire_permit("launch")
    try:
        ...  # provision
    finally:
        await permit.release()

`acquire_permit` sends the acquire through the ``request_permit`` activity, which
signal-with-starts the semaphore (a workflow cannot), so the worker hosting the calling
workflow must also register `activities.semaphore.SemaphoreActivities`. It then waits,
without any timer, for the semaphore's ``orch_permit_granted`` signal. The grant handler
is registered on first use with `workflow.set_signal_handler`; one handler serves every
permit of the workflow, told apart by request id.

A `Permit` is a pydantic model, so a holder that continues as new while holding can pass
it to its next run and release it there: the semaphore identifies holders by workflow id
and first run id, both kept across continue-as-new.

If the calling workflow is cancelled while asking or waiting (the cancellation arrives
as `asyncio.CancelledError`, or as the request activity's cancelled `ActivityError`), the
request is withdrawn (or the permit given back, if the grant crossed the cancellation)
before the error propagates; withdrawing a request the semaphore never received is
harmless, and keeps a late acquire from being granted. A holder that closes without
releasing is reclaimed by the semaphore's periodic check; releasing is still the fast
path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ApplicationError

# Passed through: the sandbox would otherwise rebuild these pydantic models for every
# run of every holder workflow, which costs a noticeable slice of a workflow task.
with workflow.unsafe.imports_passed_through():
    from orch.semaphore import (
        GRANT_SIGNAL,
        LAUNCH_SEMAPHORE_ID,
        RELEASE_SIGNAL,
        REQUEST_PERMIT_ACTIVITY,
        AcquireRequest,
        PermitGrant,
        PermitKind,
        PermitRequest,
        ReleaseRequest,
    )


class Permit(BaseModel):
    semaphore_id: str
    kind: PermitKind
    request_id: str

    async def release(self) -> None:
        """Gives the permit back (or withdraws the request). Releasing twice, or after the
        semaphore reclaimed the permit, is harmless: the semaphore ignores unknown ids.
        So is releasing when no semaphore runs (an operator terminated it): there is
        nothing left to give back."""
        try:
            await workflow.get_external_workflow_handle(self.semaphore_id).signal(
                RELEASE_SIGNAL, ReleaseRequest(kind=self.kind, request_id=self.request_id)
            )
        except ApplicationError as err:
            workflow.logger.warning("release of %s not delivered (%s)", self.request_id, err.type)


class _GrantInbox:
    """Request ids granted to this workflow; the handler of the grant signal."""

    def __init__(self) -> None:
        self.granted: set[str] = set()

    def receive(self, grant: PermitGrant) -> None:
        self.granted.add(grant.request_id)


def _grant_inbox() -> _GrantInbox:
    handler = workflow.get_signal_handler(GRANT_SIGNAL)
    if handler is None:
        inbox = _GrantInbox()
        workflow.set_signal_handler(GRANT_SIGNAL, inbox.receive)
        return inbox
    owner = getattr(handler, "__self__", None)
    if not isinstance(owner, _GrantInbox):
        raise RuntimeError(f"signal {GRANT_SIGNAL!r} already has a handler of its own")
    return owner


async def acquire_permit(kind: PermitKind, *, semaphore_id: str = LAUNCH_SEMAPHORE_ID,
                         on_queued: Callable[[int], None] | None = None) -> Permit:
    """Waits, FIFO, for a permit of `kind` held by the calling workflow. ``on_queued`` is
    told how many requests wait ahead of this one when it has to wait (for the Web UI)."""
    info = workflow.info()
    inbox = _grant_inbox()
    request = AcquireRequest(
        kind=kind,
        holder_id=info.workflow_id,
        holder_first_run_id=info.first_execution_run_id,
        request_id=str(workflow.uuid4()),
    )
    permit = Permit(semaphore_id=semaphore_id, kind=kind, request_id=request.request_id)
    try:
        ahead = await workflow.execute_activity(
            REQUEST_PERMIT_ACTIVITY,
            PermitRequest(semaphore_id=semaphore_id, request=request),
            start_to_close_timeout=timedelta(seconds=30),
            summary="ask the launch semaphore for a "
                    + ("launch permit" if kind == "launch" else "job slot"),
        )
        if on_queued is not None and isinstance(ahead, int):
            on_queued(ahead)
        await workflow.wait_condition(lambda: request.request_id in inbox.granted)
    except (asyncio.CancelledError, Exception):
        # Not GeneratorExit, nor the SDK's eviction: a coroutine the garbage collector
        # closes may run inside another workflow, which would get the release as its own
        # command (tests/server_teardown.py).
        await permit.release()
        raise
    inbox.granted.discard(request.request_id)
    return permit
