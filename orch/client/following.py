"""Following an Update to its outcome, in the user's words.

:func:`update_result` waits out a control plane that restarts meanwhile (the operation
goes on in the workers, and the server's database keeps the Update), so the CLI reports
the operation's real outcome rather than a connection error; :func:`update_failure` turns
a failed Update into an :class:`OrchError` that says what went wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import RPCError, WorkflowUpdateHandle
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCStatusCode

from orch.records import CANCELLED, CANCELLED_MESSAGE


class OrchError(Exception):
    """An operation orch refused or that failed; ``kind`` is the error's type name and
    ``details`` what the workflow attached (e.g. every failover attempt)."""

    def __init__(self, message: str, kind: str = "", details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.details = details or {}


def update_failure(err: BaseException) -> OrchError:
    """The user-facing message of a failed update: the innermost ApplicationError."""
    cause: BaseException | None = err
    found: ApplicationError | None = None
    while cause is not None:
        if isinstance(cause, ApplicationError):
            found = found or cause
        cause = cause.__cause__
    if found is not None:
        details = found.details[0] if found.details else None
        details = details if isinstance(details, dict) else {}
        message = found.message
        for extra in ("tail", "hint"):  # the failed setup's last lines, what to do now
            if details.get(extra):
                message += "\n" + details[extra]
        return OrchError(message, found.type or "", details)
    if _was_cancelled(err):  # cut short before any child said so
        return OrchError(CANCELLED_MESSAGE, CANCELLED)
    return OrchError(str(err))


def _was_cancelled(err: BaseException) -> bool:
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, CancelledError):
            return True
        cause = cause.__cause__
    return False


RECONNECT_S = 2.0  # between tries while the control plane does not answer
UNREACHABLE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


def unreachable(err: RPCError) -> bool:
    """Whether the server could not be reached (rather than answering with an error): a
    refused or cut connection comes as UNAVAILABLE, or as UNKNOWN "transport error" when the
    server dies mid-call."""
    return err.status in UNREACHABLE or (
        err.status == RPCStatusCode.UNKNOWN and "transport error" in str(err))


async def update_result(update: WorkflowUpdateHandle[Any],
                        on_step: Callable[[str], None] | None) -> Any:
    """The update's outcome, however long the server is away meanwhile: the operation
    goes on in the workers (the server's database keeps the update), so the follower
    waits for the server to answer again and then reports the real outcome."""
    away = False
    while True:
        try:
            outcome = await update.result()
        except RPCError as err:
            if not unreachable(err):
                raise
            if not away and on_step is not None:
                on_step("the control plane is not answering: waiting for it to come back "
                        "(the operation goes on)")
            away = True
            await asyncio.sleep(RECONNECT_S)
            continue
        if away and on_step is not None:
            on_step("the control plane answers again")
        return outcome


def stop_following(follower: asyncio.Future[Any]) -> None:
    """Stop waiting for an update's outcome (Ctrl-C, or an error while reporting); the
    operation goes on in the workers. The SDK turns the cancelled poll into a
    WorkflowUpdateRPCTimeoutOrCancelledError, which is read here: left unread, asyncio
    prints it with a traceback ("exception was never retrieved") at the user's Ctrl-C."""
    follower.cancel()
    follower.add_done_callback(lambda done: done.cancelled() or done.exception())
