"""Managed jobs from the client: launch, queue, cancel, logs.

    async with await Client.connect() as client:
        jobs = ManagedJobs(client)
        job_id = await jobs.launch(load_pipeline("train.yaml").tasks, name="train")

A job is the workflow ``job/<id>`` (ManagedJobWorkflow); ids come from the ``managed-jobs``
allocator workflow, one Update per launch. `queue` is one visibility query (each job keeps
a ``JobSummary`` in its memo). Cancel is the workflow's ``cancel`` signal: the workflow
tears the job's cluster down, gives its job slot back and ends CANCELLED.

Output never goes through Temporal, nor over SSH from here: the worker's watch activity
copies each attempt's output to the staging store as it is written (``orch.job_output``),
and `logs` reads it from there, following the running attempt by polling the store. An
attempt the store has nothing of (a job from before output was stored) is read from the
worker's copy under ``$ORCH_HOME/managed_jobs/<id>/`` when this machine has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from orch.bulk_teardown import BULK_TEARDOWN_ID, CANCEL_JOBS_SIGNAL, CancelJobs
from orch.client import Client, OrchError
from orch.client.attribution import requester, start_attributes
from orch.client.bulk_teardown import signal_bulk_teardown, signal_cancel
from orch.config import orch_home
from orch.job_output import OutputReader, attempt_output
from orch.managed_jobs import (
    ALLOCATE_UPDATE,
    JOB_REVISION,
    MANAGED_JOB_IDS_WORKFLOW,
    MANAGED_JOB_IDS_WORKFLOW_ID,
    MEMO_SUMMARY,
    STATE_QUERY,
    CancelRequest,
    JobIdsInput,
    JobSummary,
    ManagedJobInput,
    ManagedJobState,
    ManagedJobStatus,
    TaskRun,
    TaskStage,
    attempt_log_path,
    job_id_of,
    managed_job_workflow_id,
    new_state,
    summarize,
)
from orch.names import check_name
from orch.records import MANAGED_JOB_WORKFLOW
from orch.spec import Task
from orch.summaries import job_summary, pipeline_details

FOLLOW_POLL_S = 1.0
NO_SUCH_JOB = "NoSuchJob"
ALLOCATE_ATTEMPTS = 12
ALLOCATE_RETRY_S = 0.2
CANCEL_IDS_PER_SIGNAL = 1_000  # cancel_all: job ids per signal to the bulk teardown
CANCEL_SIGNALS_AT_ONCE = 32  # cancel_all: cancel signals to the jobs in flight at once
# What the server answers when the allocator has too many Updates in flight, or aborted
# one (continue-as-new): worth another try.
_BUSY = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.ABORTED}


class CancelOutcome(BaseModel):
    job_id: int
    requested: bool  # False: the job had already ended
    status: ManagedJobStatus | None = None  # its final status, when it had ended


class ManagedJobs:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.temporal = client.temporal

    def _handle(self, job_id: int) -> WorkflowHandle[ManagedJobInput, ManagedJobState]:
        return self.temporal.get_workflow_handle(managed_job_workflow_id(job_id),
                                                 result_type=ManagedJobState)

    async def allocate_id(self) -> int:
        """The next job id, from the allocator workflow (started on first use).

        A workflow takes at most 10 Updates in flight: when many clients launch at once
        the server refuses the excess (or aborts an Update caught by a continue-as-new),
        so the Update is retried with backoff, under one Update id so that a retry of an
        Update that did run gets the same job id back."""
        update_id = str(uuid.uuid4())
        delay, attempts = ALLOCATE_RETRY_S, 0
        while True:
            start: WithStartWorkflowOperation[JobIdsInput, None] = WithStartWorkflowOperation(
                MANAGED_JOB_IDS_WORKFLOW, JobIdsInput(), id=MANAGED_JOB_IDS_WORKFLOW_ID,
                task_queue=self.client.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary="managed job ids: hands out 1, 2, 3, … in order",
            )
            try:
                job_id: int = await self.temporal.execute_update_with_start_workflow(
                    ALLOCATE_UPDATE, start_workflow_operation=start, id=update_id,
                    result_type=int)
                return job_id
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                with contextlib.suppress(Exception):  # the start's share of the failure
                    await start.workflow_handle()
                attempts += 1
                busy = not isinstance(err, RPCError) or err.status in _BUSY
                if not busy or attempts == ALLOCATE_ATTEMPTS:
                    raise OrchError(f"no managed-job id could be allocated: {err}") from None
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)

    async def launch(self, tasks: list[Task], name: str | None = None) -> int:
        """Start a managed job running ``tasks`` one after another; returns its id.
        Resources nothing could ever provide are refused before anything starts."""
        if not tasks:
            raise OrchError("a managed job needs at least one task")
        name = name or tasks[0].name
        if name is not None:
            check_name(name, "managed job", kind="managed-job name")
        for task in tasks:
            Client.validate(task)
        tasks = [await Client.stage(task) for task in tasks]
        job_id = await self.allocate_id()
        plane_hash = self.client.plane_hash
        summary = summarize(new_state(job_id, name, tasks, datetime.now(UTC), plane_hash))
        user, headline = requester(), job_summary(job_id, name, tasks)
        await self.temporal.start_workflow(
            MANAGED_JOB_WORKFLOW,
            ManagedJobInput(job_id=job_id, name=name, tasks=tasks, requested_by=user,
                            plane_hash=plane_hash, revision=JOB_REVISION),
            id=managed_job_workflow_id(job_id), task_queue=self.client.task_queue,
            memo={MEMO_SUMMARY: summary.model_dump(mode="json")},
            search_attributes=start_attributes(user, headline, job_id, name),
            static_summary=headline,
            static_details=pipeline_details(tasks, user),
        )
        return job_id

    async def queue(self) -> list[JobSummary]:
        """Every managed job the server still remembers, newest first."""
        query = (f"WorkflowType = '{MANAGED_JOB_WORKFLOW}' "
                 "AND ExecutionStatus != 'ContinuedAsNew'")
        jobs: dict[int, JobSummary] = {}
        async for execution in self.temporal.list_workflows(query):
            memo = await execution.memo()
            if MEMO_SUMMARY not in memo:
                continue
            summary = JobSummary.model_validate(memo[MEMO_SUMMARY])
            _mark_ended_early(summary, execution.status, execution.close_time)
            jobs[summary.id] = summary
        return sorted(jobs.values(), key=lambda j: j.id, reverse=True)

    async def state(self, job_id: int) -> ManagedJobState:
        """The job's whole state: from the workflow while it runs, its result after."""
        handle = self._handle(job_id)
        try:
            description = await handle.describe()
            if description.status == WorkflowExecutionStatus.COMPLETED:
                return await handle.result()
            state: ManagedJobState = await handle.query(STATE_QUERY,
                                                        result_type=ManagedJobState)
            _mark_ended_early(state, description.status, description.close_time)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise OrchError(f"no managed job {job_id}", NO_SUCH_JOB) from None
            raise OrchError(f"managed job {job_id}: {err.message}") from None
        except (WorkflowQueryFailedError, WorkflowFailureError) as err:
            raise OrchError(f"managed job {job_id} cannot be read: {err}") from None
        return state

    async def cancel(self, job_id: int) -> CancelOutcome:
        handle = self._handle(job_id)
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise OrchError(f"no managed job {job_id}", NO_SUCH_JOB) from None
            raise
        if description.status == WorkflowExecutionStatus.RUNNING:
            return await self._signal_cancel(job_id)
        return CancelOutcome(job_id=job_id, requested=False,
                             status=(await self.state(job_id)).status)

    async def _signal_cancel(self, job_id: int,
                             request: CancelRequest | None = None) -> CancelOutcome:
        """The cancel signal to a job that was running; its status if it ended since."""
        if await signal_cancel(self.temporal, managed_job_workflow_id(job_id), request):
            return CancelOutcome(job_id=job_id, requested=True)
        return CancelOutcome(job_id=job_id, requested=False,
                             status=(await self.state(job_id)).status)

    async def cancel_all(self, on_step: Callable[[str], None] | None = None,
                         ) -> list[CancelOutcome]:
        """Cancel every running job, newest first, through the bulk teardown
        (``orch.bulk_teardown``), which terminates the clusters they leave. The running
        jobs come from one visibility query. Their ids go to the entity first, in signals
        of ``CANCEL_IDS_PER_SIGNAL`` (signal-with-start), so that nothing is lost if this
        process dies; then each job is signalled from here, ``CANCEL_SIGNALS_AT_ONCE`` at
        once, on the entity's behalf: the job ends in the task of that signal and leaves
        its cluster in its result, which the entity reads. The entity's ``cancel_jobs``
        activity signals itself any job still running two minutes after it began to read
        its result. ``on_step`` is told each step.

        Signalled from here, every job has its cancel when this returns, as with
        ``sky jobs cancel -a``. (It was thought faster too, the entity's activity having
        sent 2,000 signals at about 21 a second; measured, it is not: a cancel-all of
        1,995 took 97.7 s this way and 100.9 s that way, README, Performance.)"""
        step = on_step or (lambda _: None)
        step("listing the running jobs")
        query = f"WorkflowType = '{MANAGED_JOB_WORKFLOW}' AND ExecutionStatus = 'Running'"
        running = sorted({job_id_of(e.id) async for e in self.temporal.list_workflows(query)},
                         reverse=True)
        ids = [managed_job_workflow_id(job_id) for job_id in running]
        step(f"handing {len(ids)} job(s) to the bulk teardown")
        for start in range(0, len(ids), CANCEL_IDS_PER_SIGNAL):
            await signal_bulk_teardown(
                self.temporal, self.client.task_queue, CANCEL_JOBS_SIGNAL,
                CancelJobs(job_ids=ids[start:start + CANCEL_IDS_PER_SIGNAL]))
        step(f"signalling {len(ids)} job(s)")
        limit, request = asyncio.Semaphore(CANCEL_SIGNALS_AT_ONCE), CancelRequest(
            sent_by=BULK_TEARDOWN_ID)

        async def cancelled(job_id: int) -> CancelOutcome:
            async with limit:
                return await self._signal_cancel(job_id, request)

        return list(await asyncio.gather(*(cancelled(job_id) for job_id in running)))

    # -- output ------------------------------------------------------------------------
    async def logs(
        self, job_id: int, follow: bool = True, on_line: Callable[[str], None] = print,
        on_status: Callable[[ManagedJobState], None] | None = None,
    ) -> ManagedJobState:
        """Print the output of every task and attempt in order, from the staging store
        (``orch.job_output``); with ``follow``, keep going (through recoveries and the
        next tasks) until the job ends. Returns the job's last state. ``on_status`` is
        told each change of status."""
        shown: set[tuple[int, int]] = set()
        seen: tuple[ManagedJobStatus, int] | None = None
        while True:
            state = await self.state(job_id)
            if on_status is not None and (state.status, state.current_task) != seen:
                seen = (state.status, state.current_task)
                on_status(state)
            several = len(state.runs) > 1 or state.current.attempt > 1
            for run in state.runs[:state.current_task + 1]:
                for attempt in range(1, run.attempt + 1):
                    if (run.index, attempt) in shown:
                        continue
                    if several:
                        on_line(f"[orch] task {run.index + 1}/{len(state.runs)} "
                                f"({run.name or '-'}), attempt {attempt}")
                    reader = OutputReader(attempt_output(job_id, run.index, attempt), on_line)
                    if follow and _live(state, run.index, attempt):
                        await self._follow(reader, job_id, run.index, attempt)
                    elif not await asyncio.to_thread(reader.read_new):
                        self._print_saved(state.job_id, run, attempt, on_line)
                    reader.finish()
                    shown.add((run.index, attempt))
            if state.status.is_terminal or not follow:
                return state
            await asyncio.sleep(FOLLOW_POLL_S)

    async def _follow(self, reader: OutputReader, job_id: int, task_index: int,
                      attempt: int) -> None:
        """Read the attempt's output as it arrives, until it is no longer running (its
        watch stores the rest before the job's state moves on, so one last read has it)."""
        while True:
            await asyncio.to_thread(reader.read_new)
            if not _live(await self.state(job_id), task_index, attempt):
                await asyncio.to_thread(reader.read_new)
                return
            await asyncio.sleep(FOLLOW_POLL_S)

    @staticmethod
    def _print_saved(job_id: int, run: TaskRun, attempt: int,
                     on_line: Callable[[str], None]) -> None:
        """An attempt the store has nothing of: the worker's copy, when this machine has
        it (a job from before output was stored, on the embedded control plane)."""
        path = attempt_log_path(orch_home(), job_id, run.index, attempt)
        with contextlib.suppress(FileNotFoundError):
            for line in path.read_text(errors="replace").splitlines():
                on_line(line)


def _live(state: ManagedJobState, task_index: int, attempt: int) -> bool:
    """Whether the attempt may still write output: it is the one running now."""
    run = state.runs[task_index]
    return (not state.status.is_terminal and task_index == state.current_task
            and attempt == run.attempt and run.stage in (TaskStage.LAUNCH, TaskStage.WATCH))


def _mark_ended_early(job: JobSummary | ManagedJobState,
                      status: WorkflowExecutionStatus | None, closed_at: datetime | None
                      ) -> None:
    """A job whose workflow closed without finishing it (an operator terminated it, or
    it timed out) never reached a final status of its own: it is FAILED_CONTROLLER, so
    that nothing follows it forever."""
    ended_early = status not in (WorkflowExecutionStatus.RUNNING,
                                 WorkflowExecutionStatus.COMPLETED)
    if ended_early and not job.status.is_terminal:
        job.status = ManagedJobStatus.FAILED_CONTROLLER
        job.ended_at = closed_at
