"""ManagedJobWorkflow ``job/<id>``: run a task, or a pipeline of tasks, to the end despite
preemptions.

For each task, in order: (once per job) wait for a job slot of the launch semaphore, held
until the job ends → launch the task's own cluster ``job-<id>-<task>`` with LaunchWorkflow
as a child (its FailoverWorkflow takes a launch permit per provisioning round, never
during a wait; while it queues for one, the job is WAITING, as in SkyPilot's scheduler)
→ submit the run as job 1 on that cluster → watch it with one long-running ``watch_job``
activity → tear the cluster down with TeardownWorkflow. A task that does not succeed
ends the pipeline; the tasks after it are CANCELLED. A cluster that came up but whose
head refuses the job counts as a failed launch round (torn down, then backoff), so a
head that keeps refusing is never relaunched in a tight loop.

Recovery (rules in ``orch.managed_jobs``): when the watch reports the cluster lost, the
cluster is torn down and relaunched per ``job_recovery.strategy`` (EAGER_NEXT_REGION: once
anywhere but the lost region, then anywhere; FAILOVER: a few rounds in the same region,
then anywhere). Failed launch rounds back off on a durable timer (60 s, x1.6, jitter,
capped at 5x) holding no launch permit: the schedule state is then ALIVE_BACKOFF. A run
that fails while its cluster is up is restarted on that cluster (setup again, the next
job id there) up to ``max_restarts_on_errors`` times.

Cancel is the ``cancel`` signal (what `orch jobs cancel` sends; Temporal's own workflow
cancellation, e.g. from the Web UI, does the same). It sets a flag kept for the rest of
the run and cancels the task running the pipeline, so it reaches whatever the job is
waiting on: the slot, a launch child (which withdraws its permit request), a backoff
timer, the watch. A child that swallows the cancellation and returns anyway is caught by
the flag, checked after every launch round. The workflow then goes CANCELLING → tears
the cluster down → CANCELLED, and completes normally with its final state.

Every way out — success, failure, cancel, an orchestration step that failed for good
(FAILED_CONTROLLER) — runs the same cleanup in a ``finally``, shielded from cancellation:
tear down the current cluster (or, for a launch cut short before it said where it
provisions, every region it could have used), give back the job slot. Teardown children
are abandoned rather than terminated if this workflow is.

The job's state is one model (``ManagedJobState``); the workflow continues as new with it
when the history grows large, at points where nothing is in flight (before a watch or a
launch round), holding the slot and the cluster across the switch. What the controller
did is a small list of events in the state (``orch jobs logs --controller``); the job's
output never enters the history. `orch status` lists the job's cluster from the search
attributes upserted here; `orch jobs queue` reads the memo (a ``JobSummary``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    is_cancelled_exception,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
    from orch.contracts.runtime import SUBMIT_JOB, SubmitRequest
    from orch.contracts.watch import WATCH_JOB, WatchOutcome, WatchRequest, WatchResult
    from orch.failover_rules import Candidate
    from orch.managed_jobs import (
        CANCEL_SIGNAL,
        MEMO_SUMMARY,
        RESTARTABLE,
        STATE_QUERY,
        EventKind,
        LaunchFailure,
        LaunchPhase,
        ManagedJobInput,
        ManagedJobState,
        ManagedJobStatus,
        ScheduleState,
        TaskRun,
        TaskStage,
        backoff_delay,
        classify_launch_failure,
        describe_attempts,
        first_launch_plan,
        job_recovery,
        new_state,
        recovery_plan,
        summarize,
        task_status_for,
    )
    from orch.records import (
        MANAGED_JOB_WORKFLOW,
        PROGRESS_SIGNAL,
        SA_CLOUD,
        SA_CLUSTER,
        SA_CLUSTER_STATUS,
        SA_JOB_ID,
        SA_JOB_STATUS,
        SA_NUM_NODES,
        SA_REGION,
        SA_RESOURCES,
        ClusterRecord,
        LaunchInput,
        LaunchProgress,
        Placement,
        TeardownInput,
        cluster_workflow_id,
    )
    from orch.runtime.job_records import JobRecord, JobSpec
    from orch.semaphore import LAUNCH_SEMAPHORE_ID
    from orch.spec import Task
    from orch.status import ClusterStatus, JobStatus
    from orch.summaries import (
        job_details,
        job_task_purpose,
        launch_summary,
        short,
        task_details,
        teardown_summary,
    )
    from workflows import storage_steps
    from workflows.cluster import resources_summary
    from workflows.launch import LaunchWorkflow
    from workflows.options import (
        CLOUD_CALL,
        WATCH_CALL,
        error_details,
        error_message,
        error_type,
    )
    from workflows.permits import Permit, acquire_permit
    from workflows.shielding import shielded
    from workflows.teardown import TeardownWorkflow


# Waits before each new try of a teardown that failed (see ``_teardown``).
TEARDOWN_RETRY_WAITS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))


def _failed_activity(error: BaseException) -> str:
    """The type of the activity behind a (child workflow) failure, or ''."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ActivityError):
            return cause.activity_type
        cause = cause.__cause__
    return ""


@workflow.defn(name=MANAGED_JOB_WORKFLOW)
class ManagedJobWorkflow:
    @workflow.init
    def __init__(self, request: ManagedJobInput) -> None:
        self.input = request
        self.tasks = request.tasks
        self.state = request.state or new_state(request.job_id, request.name, request.tasks,
                                                workflow.now(), request.plane_hash)
        self.continuing = False
        self.cancel_requested = False
        self.pipeline: asyncio.Future[None] | None = None
        self.published: tuple[object, ...] | None = None

    # -- queries and signals ------------------------------------------------------------
    @workflow.query(name=STATE_QUERY)
    def job_state(self) -> ManagedJobState:
        return self.state

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self) -> None:
        if self.cancel_requested:
            return
        self.cancel_requested = True
        if self.pipeline is not None:
            self.pipeline.cancel()

    @workflow.signal(name=PROGRESS_SIGNAL)
    def launch_progress(self, progress: LaunchProgress) -> None:
        """LaunchWorkflow reports each step and where the cluster is as soon as it knows;
        FailoverWorkflow reports each failover hop."""
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
            self._buckets_reported(run, progress)
        self._publish()

    def _buckets_reported(self, run: TaskRun, progress: LaunchProgress) -> None:
        run.storage = storage_steps.merged(run.storage, progress.storage)
        self.state.buckets = storage_steps.added_buckets(self.state.buckets, progress.storage)

    # -- the job's life -----------------------------------------------------------------
    @workflow.run
    async def run(self, request: ManagedJobInput) -> ManagedJobState:
        if request.state is None:
            self._event(EventKind.SUBMITTED, f"{len(self.tasks)} task(s)")
        self._publish()
        self.pipeline = asyncio.ensure_future(self._run_pipeline())
        if self.cancel_requested:  # signalled before the first run started
            self.pipeline.cancel()
        try:
            await self.pipeline
        except (asyncio.CancelledError, FailureError) as err:
            if self.cancel_requested or is_cancelled_exception(err):
                self._set_status(ManagedJobStatus.CANCELLING, self.state.schedule_state)
                self._event(EventKind.CANCELLING, "cancel requested")
            else:  # an orchestration step failed for good
                kind = error_type(err) or type(err).__name__
                self.state.failure = self.state.current.failure = f"{kind}: {error_message(err)}"
                self._set_status(ManagedJobStatus.FAILED_CONTROLLER, self.state.schedule_state)
        finally:
            if not self.continuing:
                await shielded(self._finish())
        return self.state

    async def _run_pipeline(self) -> None:
        state = self.state
        if state.slot_request_id is None:
            self._set_status(ManagedJobStatus.PENDING, ScheduleState.WAITING)
            permit = await acquire_permit("job")
            state.slot_request_id = permit.request_id
            self._event(EventKind.SLOT, "got a job slot")
        while True:
            self._check_cancel()
            run = state.current
            status = await self._run_task(run, self.tasks[run.index])
            run.status, run.stage, run.ended_at = status, TaskStage.DONE, workflow.now()
            self._event(EventKind.TASK_ENDED, status, run)
            await shielded(self._teardown(run))
            if status != ManagedJobStatus.SUCCEEDED:
                for later in state.runs[run.index + 1:]:
                    later.status, later.stage = ManagedJobStatus.CANCELLED, TaskStage.DONE
                state.failure = run.failure
                self._set_status(status, state.schedule_state)
                return
            if state.current_task + 1 == len(state.runs):
                self._set_status(ManagedJobStatus.SUCCEEDED, state.schedule_state)
                return
            state.current_task += 1

    async def _finish(self) -> None:
        """Leave nothing behind: the cluster torn down, the job slot given back."""
        state = self.state
        run = state.current
        if run.placement is not None:
            await self._teardown(run)
        elif run.launching:
            await self._sweep(run)
        if state.status == ManagedJobStatus.CANCELLING:
            for each in state.runs:
                if not each.status.is_terminal:
                    each.status, each.stage = ManagedJobStatus.CANCELLED, TaskStage.DONE
            state.status = ManagedJobStatus.CANCELLED
        await self._release_buckets()
        if state.slot_request_id is not None:
            slot = Permit(semaphore_id=LAUNCH_SEMAPHORE_ID, kind="job",
                          request_id=state.slot_request_id)
            try:
                await slot.release()
            except ApplicationError as err:  # no semaphore: nothing held there any more
                workflow.logger.info("job slot not released: %s", err)
            state.slot_request_id = None
        state.ended_at = workflow.now()
        self._event(EventKind.ENDED, f"job {state.status}")
        self._set_status(state.status, ScheduleState.DONE)

    async def _release_buckets(self) -> None:
        """The job is over: it no longer uses its buckets, and each one's entity deletes
        it when no cluster or other job does and it does not persist."""
        if not self.state.buckets:
            return
        said = await storage_steps.release(workflow.info().workflow_id, self.state.buckets)
        self.state.buckets = []
        for line in said:
            self._event(EventKind.TEARDOWN, line)

    # -- one task ---------------------------------------------------------------------
    async def _run_task(self, run: TaskRun, task: Task) -> ManagedJobStatus:
        if run.stage == TaskStage.PENDING:
            run.stage, run.plan = TaskStage.LAUNCH, first_launch_plan(self.input.max_launch_rounds)
        while True:
            self._check_cancel()
            if run.stage == TaskStage.LAUNCH:
                final = await self._launch(run, task)
                if final is not None:
                    return final
                continue
            self._continue_as_new_if_due()
            result = await self._watch(run)
            if result.outcome == WatchOutcome.CLUSTER_LOST:
                await self._recover(run, task, f"cluster {run.cluster_name} lost: {result.detail}")
                continue
            assert result.job_status is not None
            limit = job_recovery(task).max_restarts_on_errors
            if result.job_status in RESTARTABLE and run.restarts < limit:
                await self._restart(run, task, f"the job ended {result.job_status}", limit)
                continue
            if result.job_status != JobStatus.SUCCEEDED:
                run.failure = f"the job on {run.cluster_name} ended {result.job_status}"
            return task_status_for(result.job_status)

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
        """One LaunchWorkflow; None when the cluster is up and set up."""
        run.launching = True
        state = self.state
        request.purpose = job_task_purpose(state.job_id, state.name, run.index, len(state.runs))
        request.requested_by = self.input.requested_by
        try:
            output = await workflow.execute_child_workflow(
                LaunchWorkflow.run, request, id=self._child_id("launch", run),
                # A job workflow that ends while launching (terminated) asks the launch to
                # stop, so its failover removes the nodes it made; the job's teardowns
                # (below) are ABANDONed instead, so that they finish.
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=launch_summary(run.cluster_name, request.task, request.reuse,
                                              request.purpose),
                static_details=task_details(request.task, request.requested_by),
            )
        except ChildWorkflowError as err:
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

    async def _watch(self, run: TaskRun) -> WatchResult:
        placement, info = run.placement, run.info
        assert placement is not None and info is not None and info.head is not None
        return await workflow.execute_activity(
            WATCH_JOB,
            WatchRequest(
                job_id=self.state.job_id, task_index=run.index, attempt=run.attempt,
                cluster_name=run.cluster_name, name_on_cloud=run.name_on_cloud,
                cloud=placement.cloud, region=placement.region, head=info.head,
                num_nodes=len(info.nodes), cluster_job_id=run.cluster_job_id,
                poll_interval_s=self.input.poll_interval_s,
            ),
            result_type=WatchResult, **WATCH_CALL,
            summary=f"watch job {run.cluster_job_id} on {run.cluster_name} until it ends or "
                    "the cluster is lost",
        )

    async def _recover(self, run: TaskRun, task: Task, why: str) -> None:
        """The cluster is lost: tear it down, plan the relaunch per the task's strategy."""
        run.recoveries += 1
        self._event(EventKind.PREEMPTED, f"{why}; recovery {run.recoveries} "
                                         f"({job_recovery(task).strategy})", run)
        self._set_status(ManagedJobStatus.RECOVERING, ScheduleState.LAUNCHING)
        lost = run.placement
        await shielded(self._teardown(run))
        run.plan, run.stage = recovery_plan(task, lost), TaskStage.LAUNCH

    async def _restart(self, run: TaskRun, task: Task, why: str, limit: int) -> None:
        """The user's code failed on a cluster that is up: set up and run again there."""
        run.restarts += 1
        self._event(EventKind.RESTARTING, f"{why}; restart {run.restarts} of {limit}", run)
        self._set_status(ManagedJobStatus.RECOVERING, ScheduleState.LAUNCHING)
        job_id = run.cluster_job_id + 1
        failure = await self._launch_round(run, LaunchInput(
            cluster_name=run.cluster_name, name_on_cloud=run.name_on_cloud, task=task,
            placement=run.placement, reuse=run.info, gcs_address=run.gcs_address, job_id=job_id,
            **self._storage_of_launches(),
        ))
        self._check_cancel()
        if failure is None:
            refused = await self._submit(run, task)
            if refused is not None:
                await self._recover(run, task, refused)
        elif failure[0] == LaunchFailure.SETUP:
            self._job_on_cluster(run, job_id)
        else:
            await self._recover(run, task, f"restart on {run.cluster_name} failed: {failure[1]}")

    def _storage_of_launches(self) -> dict[str, Any]:
        """The job uses its tasks' buckets beside their clusters, on the stores it chose
        first (a recovery in another cloud keeps its checkpoints)."""
        return {"storage_pins": list(self.state.buckets),
                "storage_owner": workflow.info().workflow_id}

    async def _sweep(self, run: TaskRun) -> None:
        """A launch cut short (cancelled) before it said where it provisions: terminate the
        cluster's instances wherever the launch could have put them."""
        phase = run.plan.current if run.plan is not None else LaunchPhase()
        request = PlanRequest(task=self.tasks[run.index], blocklist=phase.blocklist,
                              placement=phase.pin)
        try:
            candidates = await workflow.execute_activity(
                PLAN_CANDIDATES, request, result_type=list[Candidate], **CLOUD_CALL,
                summary=f"plan: where a cut-short launch of {run.cluster_name} may have "
                        "provisioned")
        except ActivityError:
            candidates = []  # nowhere it could have provisioned
        for cloud, region in dict.fromkeys((c.cloud, c.region) for c in candidates):
            run.placement = Placement(cloud=cloud, region=region)
            await self._teardown(run, quiet_if_empty=True)
        run.launching = False

    async def _teardown(self, run: TaskRun, quiet_if_empty: bool = False) -> None:
        """Terminate the task's cluster, if any instance may exist; forget it either way.

        A teardown that fails (its cloud calls kept failing through their own retries)
        is tried again after each of TEARDOWN_RETRY_WAITS, on durable timers: a cloud
        API outage of minutes must not leak the cluster. Only then is it given up, with
        where its instances may remain in the controller log."""
        placement = run.placement
        if placement is not None:
            for wait in (*TEARDOWN_RETRY_WAITS, None):
                try:
                    result = await workflow.execute_child_workflow(
                        TeardownWorkflow.run,
                        TeardownInput(cluster_name=run.cluster_name,
                                      name_on_cloud=run.name_on_cloud, placement=placement,
                                      info=run.info, terminate=True, storage=run.storage,
                                      storage_user=cluster_workflow_id(run.cluster_name)),
                        id=self._child_id("down", run),
                        parent_close_policy=ParentClosePolicy.ABANDON,
                        static_summary=teardown_summary(run.cluster_name, placement, run.info,
                                                        terminate=True),
                    )
                except ChildWorkflowError as err:
                    then = (f"trying again in {wait}" if wait is not None else
                            "instances tagged orch-cluster="
                            f"{run.name_on_cloud or run.cluster_name} may remain "
                            f"on {placement.cloud}/{placement.region}")
                    self._event(EventKind.TEARDOWN, f"teardown of {run.cluster_name} failed: "
                                                    f"{error_message(err)}; {then}", run)
                    if wait is None:
                        break
                    await workflow.sleep(wait)
                    continue
                if result.instances or not quiet_if_empty:
                    self._event(EventKind.TEARDOWN,
                                "; ".join([result.message, *result.warnings]), run)
                break
        if placement is not None:
            run.usage.gone(placement, len(run.info.nodes) if run.info else 0, run.resources,
                           workflow.now())
        run.placement = run.info = run.gcs_address = None
        run.cluster_up, run.cluster_job_id, run.resources = False, 0, ""
        run.storage = []
        self._publish()

    # -- plumbing ------------------------------------------------------------------------
    def _check_cancel(self) -> None:
        """Raise the cancellation a child may have swallowed."""
        if self.cancel_requested:
            raise asyncio.CancelledError()

    def _continue_as_new_if_due(self) -> None:
        info = workflow.info()
        if (info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= self.input.max_events_per_run):
            self.continuing = True
            workflow.continue_as_new(self.input.model_copy(update={"state": self.state}))

    def _child_id(self, kind: str, run: TaskRun) -> str:
        self.state.children += 1
        return f"{workflow.info().workflow_id}/{kind}-{run.index}-{self.state.children}"

    def _event(self, kind: EventKind, message: str, run: TaskRun | None = None) -> None:
        task = run.index if run is not None else None
        workflow.logger.info("job %s: %s %s", self.state.job_id, kind, message)
        self.state.record(workflow.now(), kind, message, task)
        workflow.set_current_details(job_details(self.state))

    def _set_status(self, status: ManagedJobStatus, schedule: ScheduleState) -> None:
        self.state.status, self.state.schedule_state = status, schedule
        if not self.state.current.status.is_terminal:
            self.state.current.status = status
        self._publish()
        workflow.set_current_details(job_details(self.state))

    def _publish(self) -> None:
        """The memo (for `orch jobs queue`) and, when enabled, the search attributes that
        put the job's cluster in `orch status`; upserted only when they change."""
        state, run = self.state, self.state.current
        summary = summarize(state).model_dump(mode="json")
        cluster_status = (ClusterStatus.UP if run.cluster_up
                          else ClusterStatus.INIT if run.placement is not None else None)
        current = (tuple(sorted(summary.items())), cluster_status, run.resources)
        if current == self.published:
            return
        self.published = current
        workflow.upsert_memo({MEMO_SUMMARY: summary})
        if not self.input.publish_search_attributes:
            return  # the time-skipping test server has no custom search attributes
        updates: list[SearchAttributeUpdate] = [
            SearchAttributeKey.for_keyword(SA_JOB_ID).value_set(str(state.job_id)),
            SearchAttributeKey.for_keyword(SA_JOB_STATUS).value_set(state.status),
        ]
        cluster_keys = [SearchAttributeKey.for_keyword(k) for k in (
            SA_CLUSTER, SA_CLUSTER_STATUS, SA_CLOUD, SA_REGION, SA_RESOURCES)]
        nodes_key = SearchAttributeKey.for_int(SA_NUM_NODES)
        if cluster_status is None or run.placement is None:
            updates += [key.value_unset() for key in cluster_keys] + [nodes_key.value_unset()]
        else:
            values = [run.cluster_name, cluster_status, run.placement.cloud,
                      run.placement.region, run.resources]
            updates += [key.value_set(value) for key, value in zip(cluster_keys, values,
                                                                   strict=True)]
            updates.append(nodes_key.value_set(len(run.info.nodes) if run.info else 0))
        workflow.upsert_search_attributes(updates)
