"""Progress reports from LaunchWorkflow to the workflow that follows the launch: the
cluster's, or the managed job's.

A report is a signal. Awaiting each one at once cost every step a round trip through the
server (the signal's completion, then a workflow task) on the launch's critical path, so
a report that only says how far the launch is leaves with the next step's own command and
is awaited before the next report (reports arrive in order) or the workflow's end
(:meth:`ProgressReports.drained`).

FailoverWorkflow still awaits each of its reports: sent this way (commit ``1c04204``), a
``down`` of a launch stuck in ``--retry-until-up`` (whose failover continues-as-new every
round) hung past a minute in 1 of 6 runs under CPU load, against 0 of 8 before; the cause
was not found, so it was reverted. It may have been the test suite's own flake fixed later
(a garbage-collected workflow coroutine sending its command into another test's workflow,
``tests/server_teardown.py``): worth trying again.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orch.records import PROGRESS_SIGNAL, LaunchProgress


class ProgressReports:
    """The reports of one workflow run, in order, to the workflow that follows it.

    ``patch`` is the ``workflow.patched`` id under which reports overlap their steps, so
    histories recorded while every report was awaited at once still replay."""

    def __init__(self, patch: str) -> None:
        self._patch = patch
        self._in_flight: asyncio.Task[None] | None = None

    async def send(self, to: str | None, progress: LaunchProgress) -> None:
        """Report ``progress`` to workflow ``to`` (none: nobody follows this run)."""
        if to is None:
            return
        await self.drained()
        handle = workflow.get_external_workflow_handle(to)
        if workflow.patched(self._patch):
            self._in_flight = asyncio.ensure_future(handle.signal(PROGRESS_SIGNAL, progress))
        else:
            await handle.signal(PROGRESS_SIGNAL, progress)

    async def drained(self) -> None:
        """Wait until the last report has reached its workflow."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight
