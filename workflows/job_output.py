"""JobOutputWorkflow (``<cluster workflow id>/output/<name on cloud>/job-<id>``): copies a
cluster's own job's output to the staging store while the job runs, so that the CLI
follows it there (``orch/client/cluster_output.py``) with no way to the head of its own.

The CLI starts it when it wants the output (``orch launch`` and ``orch exec`` following
their job, ``orch logs``); the id makes one per job, and one that finished is not
started again (the store has what it copied). Its one activity is the managed jobs'
watch (``activities/managed_job.py``) in its cluster-job form: it copies the output as
it is written, survives a worker's death (resumed from its heartbeat details), and
returns when the job ended or its cluster is gone, which ends the workflow.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orch.contracts.watch import WATCH_JOB, WatchRequest, WatchResult
    from orch.job_output import JOB_OUTPUT_WORKFLOW
    from workflows.options import WATCH_CALL


@workflow.defn(name=JOB_OUTPUT_WORKFLOW)
class JobOutputWorkflow:
    @workflow.run
    async def run(self, request: WatchRequest) -> WatchResult:
        return await workflow.execute_activity(
            WATCH_JOB, request, result_type=WatchResult, **WATCH_CALL,
            summary=f"copy job {request.cluster_job_id}'s output on {request.cluster_name} "
                    "to the staging store until it ends")
