"""ManagedJobIdsWorkflow (``managed-jobs``): hands out managed-job ids, 1, 2, 3...

One short Update per launch (``allocate``) returns the next id; the handler is synchronous,
so ids are unique and increasing however many clients launch at once (one is skipped when
a client dies between allocating it and starting its job, or when a retried Update lands
after a continue-as-new). The client reaches it
with update-with-start, so it is created on first use. It continues as new, carrying the
next id, every ``allocations_per_run`` ids (or when the server suggests it).
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
        self.allocated = 0

    @workflow.run
    async def run(self, request: JobIdsInput) -> None:
        # Counted, not measured: a burst of Updates is handled in one workflow task, after
        # which no task may come to notice how long the history has grown.
        def due() -> bool:
            return (self.allocated >= request.allocations_per_run
                    or workflow.info().is_continue_as_new_suggested())

        await workflow.wait_condition(lambda: due() and workflow.all_handlers_finished())
        workflow.continue_as_new(request.model_copy(update={"next_id": self.next_id}))

    @workflow.update(name=ALLOCATE_UPDATE)
    def allocate(self) -> int:
        job_id = self.next_id
        self.next_id += 1
        self.allocated += 1
        return job_id
