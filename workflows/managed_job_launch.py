"""How a managed job gets its task onto a cluster: launch rounds in the phases of the task's
launch plan, with backoff between failed rounds and no launch permit held meanwhile, then
the submit of the run on the head.

A round runs the launch steps (``workflows/launch_steps.py``) in the job's own workflow,
each report applied to the job's state at once (:class:`InJobLaunch`); jobs submitted
before that (``ManagedJobInput.revision`` 0) run each round as a LaunchWorkflow child,
which reports by signal, and still do so when they replay.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.contracts.runtime import SUBMIT_JOB, SubmitRequest
    from orch.managed_jobs import (
        EventKind,
        LaunchFailure,
        ManagedJobStatus,
        ScheduleState,
        TaskRun,
        TaskStage,
        backoff_delay,
        classify_launch_failure,
        describe_attempts,
    )
    from orch.records import ClusterRecord, LaunchInput, LaunchOutput, LaunchProgress
    from orch.runtime.job_records import JobRecord, JobSpec
    from orch.spec import Task
    from orch.summaries import job_task_purpose, launch_summary, short, task_details
    from workflows import launch_steps, storage_steps
    from workflows.cluster_base import resources_summary
    from workflows.launch import LaunchWorkflow
    from workflows.managed_job_base import ManagedJobBase
    from workflows.options import CLOUD_CALL, error_details, error_message, error_type
    from workflows.progress import ProgressReports
    from workflows.shielding import shielded


def _failed_activity(error: BaseException) -> str:
    """The type of the activity behind a (child workflow) failure, or ''."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ActivityError):
            return cause.activity_type
        cause = cause.__cause__
    return ""


class JobLaunches(ManagedJobBase):
    """Launch rounds and the submit (see the module docstring)."""

    async def _launch(self, run: TaskRun, task: Task) -> ManagedJobStatus | None:
        """Run the task's launch plan from where it stands until a job is on a cluster
        (None), or the plan is spent (the task's final status)."""
        plan = run.plan
        assert plan is not None
        while True:
            self._check_cancel()
            self._continue_as_new_if_due()
            if plan.next_round_at is not None:
                wait = plan.next_round_at - workflow.now()
                if wait > timedelta(0):
                    await workflow.sleep(wait)
                plan.next_round_at = None
            phase = plan.current
            status = ManagedJobStatus.RECOVERING if plan.recovering else ManagedJobStatus.STARTING
            self._set_status(status, ScheduleState.LAUNCHING)
            round_text = f" (round {plan.rounds + 1})" if plan.rounds else ""
            self._event(EventKind.LAUNCHING,
                        f"launching {run.cluster_name} {phase.where}{round_text}", run)
            failure = await self._launch_round(run, LaunchInput(
                cluster_name=run.cluster_name, name_on_cloud=run.name_on_cloud, task=task,
                placement=phase.pin, blocklist=phase.blocklist, job_id=1,
                **self._storage_of_launches(),
            ))
            self._check_cancel()
            if failure is None:
                refused = await self._submit(run, task)
                if refused is None:
                    run.plan = None
                    return None
                # Up but unable to take the job: a failed round (backoff), not a lost
                # cluster, or a head that keeps refusing would be relaunched in a loop.
                failure = LaunchFailure.CLUSTER, refused
            kind, message = failure
            if kind == LaunchFailure.SETUP:
                run.plan = None
                self._job_on_cluster(run, 1)  # recorded FAILED_SETUP there, with its output
                return None
            self._event(EventKind.LAUNCH_FAILED, message, run)
            await shielded(self._teardown(run))
            plan.rounds += 1
            if kind == LaunchFailure.PRECHECK or (
                phase.max_rounds is not None and plan.rounds >= phase.max_rounds
            ):
                if plan.phase + 1 < len(plan.phases):
                    plan.phase, plan.rounds = plan.phase + 1, 0
                    continue
                run.failure = message
                if kind == LaunchFailure.PRECHECK:
                    return ManagedJobStatus.FAILED_PRECHECKS
                return ManagedJobStatus.FAILED_NO_RESOURCE
            delay = backoff_delay(plan.backoffs, workflow.random().random())
            plan.backoffs += 1
            plan.next_round_at = workflow.now() + delay
            self._set_status(ManagedJobStatus.PENDING, ScheduleState.ALIVE_BACKOFF)
            self._event(EventKind.BACKOFF, f"backing off {delay.total_seconds():g} s after "
                                           f"{short(message)}: no launch permit held meanwhile",
                        run)

    async def _launch_round(self, run: TaskRun, request: LaunchInput
                            ) -> tuple[LaunchFailure, str] | None:
        """One launch; None when the cluster is up and set up."""
        run.launching = True
        state = self.state
        request.purpose = job_task_purpose(state.job_id, state.name, run.index, len(state.runs))
        request.requested_by = self.input.requested_by
        launch_id = self._child_id("launch", run)
        try:
            if self._older_job:
                output = await self._launch_child(launch_id, request)
            else:
                output = await launch_steps.launch(InJobLaunch(self, launch_id), request)
        except (ActivityError, ChildWorkflowError) as err:
            if is_cancelled_exception(err):
                raise
            run.launching = False
            details = error_details(err)
            kind = classify_launch_failure(error_type(err), _failed_activity(err), details)
            hops = describe_attempts(details)
            message = f"{error_type(err) or 'LaunchFailed'}: {error_message(err)}"
            return kind, message + (f" [{hops}]" if hops else "")
        run.launching = False
        run.placement, run.info, run.gcs_address = output.placement, output.info, output.gcs_address
        run.cluster_up = True
        run.resources = resources_summary(
            ClusterRecord(name=run.cluster_name, placement=output.placement, info=output.info)
        )
        run.usage.up(workflow.now())
        where = "/".join(p for p in (output.placement.cloud, output.placement.region,
                                     output.placement.zone) if p)
        done = "set up again" if request.reuse else "up"
        self._event(EventKind.LAUNCHED, f"{run.cluster_name} {done} in {where}: {run.resources}",
                    run)
        self._publish()
        return None

    async def _launch_child(self, launch_id: str, request: LaunchInput) -> LaunchOutput:
        return await workflow.execute_child_workflow(
            LaunchWorkflow.run, request, id=launch_id,
            # A job workflow that ends while launching (terminated) asks the launch to
            # stop, so its failover removes the nodes it made; the job's teardowns
            # (below) are ABANDONed instead, so that they finish.
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            static_summary=launch_summary(request.cluster_name, request.task, request.reuse,
                                          request.purpose),
            static_details=task_details(request.task, request.requested_by),
        )

    def _launch_progress(self, progress: LaunchProgress) -> None:
        """A launch step, and where the cluster is as soon as the launch knows; or a
        failover hop."""
        run = self.state.current
        for step in (*progress.earlier, progress.step):
            self._event(EventKind.STEP, step, run)
        if progress.waiting_for_permit is not None:
            # Queued behind other launches, a job is WAITING, as in SkyPilot's scheduler.
            waiting = progress.waiting_for_permit
            status = (ManagedJobStatus.RECOVERING
                      if self.state.status == ManagedJobStatus.RECOVERING
                      else ManagedJobStatus.PENDING if waiting else ManagedJobStatus.STARTING)
            self._set_status(status,
                             ScheduleState.WAITING if waiting else ScheduleState.LAUNCHING)
        if progress.placement is not None:
            run.placement = progress.placement
        if progress.info is not None:
            run.info = progress.info
        if progress.gcs_address is not None:
            run.gcs_address = progress.gcs_address
        if progress.storage:  # before they are attached: teardown and the end release them
            run.storage = storage_steps.merged(run.storage, progress.storage)
            self.state.buckets = storage_steps.added_buckets(self.state.buckets,
                                                             progress.storage)
        self._publish()

    def _job_spec(self, run: TaskRun, task: Task, job_id: int) -> JobSpec:
        assert run.info is not None and run.gcs_address is not None
        return JobSpec.for_task(task, job_id, run.cluster_name, run.info, run.gcs_address, {
            "ORCH_MANAGED_JOB_ID": str(self.state.job_id),
            "ORCH_MANAGED_TASK_INDEX": str(run.index),
        })

    async def _submit(self, run: TaskRun, task: Task) -> str | None:
        """Submit the run as the next job on the cluster; why, if the head could not
        take it."""
        job_id = run.cluster_job_id + 1
        assert run.info is not None and run.info.head is not None
        request = SubmitRequest(head=run.info.head, spec=self._job_spec(run, task, job_id))
        try:
            await workflow.execute_activity(
                SUBMIT_JOB, request, result_type=JobRecord, **CLOUD_CALL,
                summary=f"submit job {job_id} to the head of {run.cluster_name}")
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            return f"job could not be submitted: {error_message(err)}"
        self._job_on_cluster(run, job_id)
        self._set_status(ManagedJobStatus.RUNNING, ScheduleState.ALIVE)
        self._event(EventKind.RUNNING, f"job {job_id} running on {run.cluster_name} "
                                       f"(attempt {run.attempt})", run)
        return None

    def _job_on_cluster(self, run: TaskRun, job_id: int) -> None:
        now = workflow.now()
        run.cluster_job_id, run.stage = job_id, TaskStage.WATCH
        run.attempt += 1
        run.started_at = run.started_at or now
        self.state.started_at = self.state.started_at or now

    def _storage_of_launches(self) -> dict[str, Any]:
        """The job uses its tasks' buckets beside their clusters, on the stores it chose
        first (a recovery in another cloud keeps its checkpoints)."""
        return {"storage_pins": list(self.state.buckets),
                "storage_owner": workflow.info().workflow_id}


class InJobLaunch:
    """The launch steps' host (``launch_steps.LaunchHost``) in the job's own workflow:
    a report is applied to the job's state at once, a note waits for the next report (each
    application may upsert the job's memo and search attributes), and the failover keeps
    the id it had under a LaunchWorkflow child (``job/<id>/launch-<task>-<n>/failover``)."""

    def __init__(self, job: JobLaunches, launch_id: str) -> None:
        self.job = job
        self.report_to: str | None = workflow.info().workflow_id
        self.failover_id = f"{launch_id}/failover"
        self.notes = ProgressReports(None)

    def patched(self, patch_id: str) -> bool:
        return True  # no job that launches in its own workflow ran the steps before a patch

    def show(self, details: str) -> None:
        """Nothing: the job's current details show its events, each step among them."""

    async def report(self, progress: LaunchProgress) -> None:
        self.job._launch_progress(self.notes.with_notes(progress))

    async def note(self, progress: LaunchProgress) -> None:
        self.notes.note(progress)
