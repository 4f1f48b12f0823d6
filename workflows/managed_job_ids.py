"""ManagedJobIdsWorkflow (``managed-jobs``): hands out managed-job ids, 1, 2, 3...

One short Update per launch (``allocate``) returns the next id; the handler is synchronous,
so ids are unique and gapless however many clients launch at once (an id is lost only
when a client dies between allocating it and starting its job). The client reaches it
with update-with-start, so it is created on first use. It continues as new, carrying the
next id, before its history grows large.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orch.managed_jobs import ALLOCATE_UPDATE, MANAGED_JOB_IDS_WORKFLOW, JobIdsInput


@workflow.defn(name=MANAGED_JOB_IDS_WORKFLOW)
class ManagedJobIdsWorkflow:
    @workflow.init
    def __init__(self, request: JobIdsInput) -> None:
        self.next_id = request.next_id

    @workflow.run
    async def run(self, request: JobIdsInput) -> None:
        def due() -> bool:
            info = workflow.info()
            return (info.is_continue_as_new_suggested()
                    or info.get_current_history_length() >= request.max_events_per_run)

        await workflow.wait_condition(lambda: due() and workflow.all_handlers_finished())
        workflow.continue_as_new(request.model_copy(update={"next_id": self.next_id}))

    @workflow.update(name=ALLOCATE_UPDATE)
    def allocate(self) -> int:
        job_id = self.next_id
        self.next_id += 1
        return job_id
