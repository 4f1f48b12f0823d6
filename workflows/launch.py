"""LaunchWorkflow: one launch (``workflows/launch_steps.py``) as a child of the cluster's
workflow, each step reported to it by a signal (``workflows/progress.py``).

Managed jobs submitted before the steps ran in the job's own workflow also launch through
it: their histories start LaunchWorkflow children, so the job replays them.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orch.records import LAUNCH_WORKFLOW, LaunchInput, LaunchOutput, LaunchProgress
    from workflows import launch_steps
    from workflows.launch_steps import NOTES_PATCH
    from workflows.progress import ProgressReports
    from workflows.shielding import shielded

OVERLAPPED_REPORTS_PATCH = "launch-reports-overlap-steps"  # workflow.patched id


@workflow.defn(name=LAUNCH_WORKFLOW)
class LaunchWorkflow:
    """The steps' host (``launch_steps.LaunchHost``) that reports to its parent."""

    def __init__(self) -> None:
        self.reports = ProgressReports(OVERLAPPED_REPORTS_PATCH)
        parent = workflow.info().parent
        self.report_to: str | None = parent.workflow_id if parent is not None else None
        self.failover_id = f"{workflow.info().workflow_id}/failover"

    def patched(self, patch_id: str) -> bool:
        return workflow.patched(patch_id)

    def show(self, details: str) -> None:
        workflow.set_current_details(details)

    async def report(self, progress: LaunchProgress) -> None:
        workflow.set_current_details(f"**Now:** {progress.step}")
        await self.reports.send(self.report_to, progress)

    async def note(self, progress: LaunchProgress) -> None:
        """Sent with the next report (before NOTES_PATCH, a report of its own)."""
        if workflow.patched(NOTES_PATCH):
            workflow.set_current_details(f"**Now:** {progress.step}")
            self.reports.note(progress)
        else:
            await self.report(progress)

    @workflow.run
    async def run(self, request: LaunchInput) -> LaunchOutput:
        try:
            return await launch_steps.launch(self, request)
        finally:  # however it ends, the parent has every report before the end
            await shielded(self.reports.drained())
