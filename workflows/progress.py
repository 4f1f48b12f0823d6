"""Progress reports from LaunchWorkflow to the workflow that follows the launch: the
cluster's, or the managed job's.

A report is a signal. Awaiting each one at once cost every step a round trip through the
server (the signal's completion, then a workflow task) on the launch's critical path, so
a report that only says how far the launch is leaves with the next step's own command and
is awaited before the next report (reports arrive in order) or the workflow's end
(:meth:`ProgressReports.drained`).

Every report also costs the receiver a workflow task, and the sender another for the
signal's completion: nine reports were 18 of the 40 workflow tasks of a managed job's
launch. So a step that only says how far the launch is, and is soon followed by
another, is a *note* (:meth:`ProgressReports.note`): shown in the sender's current
details at once, and handed to the receiver in the next report's ``earlier`` list. A
report that carries what a teardown needs (where the nodes are, which regions were
touched, which buckets) is always sent at once; so is a report that the launch waits
for a permit. The news that the permit came is a note: "provisioning on ..." follows
once the optimizer has answered, and carries it. Notes left when the run ends are not
sent: the launch's own result says the same.

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

# What a note may have learnt, carried by the next report: the cluster's workflow keeps
# a cluster whose setup failed UP only if it knows the Ray address, and a launch permit
# granted makes a managed job STARTING.
_CARRIED = ("placement", "info", "gcs_address", "waiting_for_permit")


class ProgressReports:
    """The reports of one workflow run, in order, to the workflow that follows it.

    ``patch`` is the ``workflow.patched`` id under which reports overlap their steps, so
    histories recorded while every report was awaited at once still replay; None: every
    report is awaited at once (FailoverWorkflow's, below)."""

    def __init__(self, patch: str | None) -> None:
        self._patch = patch
        self._in_flight: asyncio.Task[None] | None = None
        self._notes: list[LaunchProgress] = []

    def note(self, progress: LaunchProgress) -> None:
        """A step for the receiver's record, sent with the next report: its step goes in
        that report's ``earlier``, and what it learnt (an address) with it, unless the
        report says newer."""
        self._notes.append(progress)

    def with_notes(self, progress: LaunchProgress) -> LaunchProgress:
        """``progress`` with the notes taken since the last report, which it now carries."""
        notes, self._notes = self._notes, []
        if not notes:
            return progress
        update: dict[str, object] = {
            "earlier": [*(s for n in notes for s in (*n.earlier, n.step)), *progress.earlier]}
        for field in _CARRIED:
            learnt = [value for n in notes if (value := getattr(n, field)) is not None]
            if getattr(progress, field) is None and learnt:
                update[field] = learnt[-1]
        return progress.model_copy(update=update)

    async def send(self, to: str | None, progress: LaunchProgress) -> None:
        """Report ``progress`` to workflow ``to`` (none: nobody follows this run, and the
        notes are dropped)."""
        if to is None:
            self._notes = []
            return
        await self.drained()
        progress = self.with_notes(progress)
        handle = workflow.get_external_workflow_handle(to)
        if self._patch is not None and workflow.patched(self._patch):
            self._in_flight = asyncio.ensure_future(handle.signal(PROGRESS_SIGNAL, progress))
        else:
            await handle.signal(PROGRESS_SIGNAL, progress)

    async def drained(self) -> None:
        """Wait until the last report has reached its workflow."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight
