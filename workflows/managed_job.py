"""ManagedJobWorkflow ``job/<id>``: run a task, or a pipeline of tasks, to the end despite
preemptions.

For each task, in order: (once per job) wait for a job slot of the launch semaphore, held
until the job ends → launch the task's own cluster ``job-<id>-<task>``, the launch steps
run in the job's workflow (``workflows/managed_job_launch.py``; its FailoverWorkflow child
takes a launch permit per provisioning round, never during a wait; while it queues for
one, the job is WAITING, as in SkyPilot's scheduler)
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
the cluster down → CANCELLED, and completes normally with its final state. A cancelled
job's cluster, and its job slot, are handed to the bulk teardown (``orch.bulk_teardown``)
rather than torn down by a TeardownWorkflow of the job's own, unless buckets are mounted
on it: the job ends CANCELLED at once, and the bulk teardown terminates its cluster with
those of other cancelled jobs, a few seconds later, then gives the slot back. When the
bulk teardown itself sent the cancel (``orch jobs cancel -a``: the signal's
``CancelRequest``), the job leaves the cluster in its result, where the entity reads it,
and ends in the workflow task of its cancel. So a cancel-all of 2,000 jobs costs the
control plane a few writes per job, not some 34.

Every way out — success, failure, cancel, an orchestration step that failed for good
(FAILED_CONTROLLER) — runs the same cleanup in a ``finally``, shielded from cancellation:
tear down (or hand over) the current cluster (or, for a launch cut short before it said where it
provisions, every region it could have used), give back the job slot. Teardown children
are abandoned rather than terminated if this workflow is.

The job's state is one model (``ManagedJobState``); the workflow continues as new with it
when the history grows large, at points where nothing is in flight (before a watch or a
launch round), holding the slot and the cluster across the switch. What the controller
did is a small list of events in the state (``orch jobs logs --controller``); the job's
output never enters the history. `orch status` lists the job's cluster from the search
attributes upserted here; `orch jobs queue` reads the memo (a ``JobSummary``).

The class is three modules, each calling only the ones below it: the record and the
teardowns (``workflows/managed_job_base.py``), the launch rounds and the submit
(``workflows/managed_job_launch.py``), and here the handlers, the pipeline, the watch and
recovery.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from orch.contracts.watch import WATCH_JOB, WatchOutcome, WatchRequest, WatchResult
    from orch.managed_jobs import (
        CANCEL_SIGNAL,
        RESTARTABLE,
        STATE_QUERY,
        CancelRequest,
        EventKind,
        LaunchFailure,
        ManagedJobInput,
        ManagedJobState,
        ManagedJobStatus,
        ScheduleState,
        TaskRun,
        TaskStage,
        first_launch_plan,
        job_recovery,
        new_state,
        recovery_plan,
        task_status_for,
    )
    from orch.records import MANAGED_JOB_WORKFLOW, PROGRESS_SIGNAL, LaunchInput, LaunchProgress
    from orch.semaphore import LAUNCH_SEMAPHORE_ID
    from orch.spec import Task
    from orch.status import JobStatus
    from workflows.managed_job_launch import JobLaunches
    from workflows.options import WATCH_CALL, error_message, error_type
    from workflows.permits import Permit, acquire_permit
    from workflows.shielding import shielded


@workflow.defn(name=MANAGED_JOB_WORKFLOW)
class ManagedJobWorkflow(JobLaunches):
    @workflow.init
    def __init__(self, request: ManagedJobInput) -> None:
        self.input = request
        self.tasks = request.tasks
        self.state = request.state or new_state(request.job_id, request.name, request.tasks,
                                                workflow.now(), request.plane_hash)
        self.continuing = False
        self.cancel_requested = False
        self.cancelled_by_bulk_teardown = False
        self.pipeline: asyncio.Future[None] | None = None
        self.published: tuple[object, ...] | None = None  # revision 0's (_publish)
        self.published_memo: tuple[object, ...] | None = None
        self.published_attributes: tuple[object, ...] | None = None
        self.publish_due = False

    # -- queries and signals ------------------------------------------------------------
    @workflow.query(name=STATE_QUERY)
    def job_state(self) -> ManagedJobState:
        return self.state

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self, request: CancelRequest | None = None) -> None:
        if request is not None and request.by_bulk_teardown:
            self.cancelled_by_bulk_teardown = True  # it reads the clusters left in the result
        if self.cancel_requested:
            return
        self.cancel_requested = True
        if self.pipeline is not None:
            self.pipeline.cancel()

    @workflow.signal(name=PROGRESS_SIGNAL)
    def launch_progress(self, progress: LaunchProgress) -> None:
        """LaunchWorkflow (jobs submitted before launches ran in the job) reports each step
        and where the cluster is as soon as it knows; FailoverWorkflow each failover hop."""
        self._launch_progress(progress)

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
        self._publish_if_due()  # before the run's end: no command may follow it
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
            await (self._hand_over(run) if self._hands_over(run) else self._teardown(run))
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
