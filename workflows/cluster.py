"""ClusterWorkflow ``cluster/<name>``: the entity that owns one cluster.

Every operation on the cluster is an Update (launch, exec, stop, start, down, autostop,
refresh), serialized by one lock, so operations never race and need no file locks.
Launch and teardown run as child workflows. Two durable timers live in the run loop:
autostop (idle minutes after the last job) and a periodic refresh against the cloud;
both survive worker restarts, and both skip their turn while an operation holds the
lock, so a refresh never removes a cluster that is still being created. The record
lives in one model that continue-as-new carries whole, and the fields `orch status`
lists are search attributes, so listing clusters is one visibility query.

Cancelling the workflow (the Web UI's "Cancel", ``temporal workflow cancel``) tears the
cluster down rather than leaving its nodes without an owner: a launch, start or exec under
way is cancelled (the failover it runs removes the nodes it was making), a stop or down
under way finishes, then a teardown runs shielded from further cancels, and the workflow
completes with the cluster TERMINATED, as after ``orch down`` (its events say it was
cancelled). Were the teardown to fail, the workflow stays, so that ``orch down`` can
retry it.

The class is three modules, each calling only the ones below it: the record, the lock,
the guards and the teardown (``workflows/cluster_base.py``), the timers, autostop and
refresh (``workflows/cluster_upkeep.py``), and here the run loop, the cancel, and the
operations that build (launch, exec, start) or end (stop, down) the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.contracts.runtime import (
        HEAD_JOBS,
        SUBMIT_JOB,
        SYNC_FILES,
        HeadJobsRequest,
        SubmitRequest,
        SyncRequest,
    )
    from orch.records import (
        CANCELLED,
        CANCELLED_MESSAGE,
        CLUSTER_WORKFLOW,
        JOBS_UPDATE,
        PROGRESS_SIGNAL,
        CancelRequest,
        ClusterInput,
        ClusterRecord,
        DownRequest,
        ExecRequest,
        JobsRequest,
        LaunchInput,
        LaunchProgress,
        LaunchRequest,
        LaunchResult,
        StartRequest,
        StopRequest,
        TeardownResult,
    )
    from orch.runtime.job_records import JobRecord, JobSpec
    from orch.spec import Task
    from orch.status import ClusterStatus
    from orch.summaries import launch_summary, on_nodes, task_details
    from workflows import storage_steps
    from workflows.cluster_base import (
        CANCEL_DOWN,
        CANCEL_TEARDOWN_PATCH,
        CANCELLABLE,
        DOWN_CUTS_SHORT_PATCH,
        MIN_TIMER,
        RELAUNCH_IN_SHAPE_PATCH,
        init_hint,
    )
    from workflows.cluster_upkeep import ClusterUpkeep
    from workflows.launch import LaunchWorkflow
    from workflows.options import CLOUD_CALL, LONG_CALL, error_details, error_message, error_type
    from workflows.shielding import shielded


@workflow.defn(name=CLUSTER_WORKFLOW)
class ClusterWorkflow(ClusterUpkeep):
    @workflow.init
    def __init__(self, request: ClusterInput) -> None:
        self.state = request.state or ClusterRecord(name=request.name,
                                                    name_on_cloud=request.name_on_cloud)
        self.publish = request.publish_search_attributes
        self.lock = asyncio.Lock()
        self.operations = 0
        self.schedule_changed = False  # wakes the run loop to recompute its timers
        self.queued: list[str] = []  # operations waiting for the lock (the Web UI shows them)
        self.current: tuple[str, asyncio.Task[object] | None] | None = None  # holds the lock
        self.cancelled = False  # the workflow was cancelled: no new operation may start

    # -- queries and signals ----------------------------------------------------------
    @workflow.query
    def record(self) -> ClusterRecord:
        return self.state

    @workflow.signal(name=PROGRESS_SIGNAL)
    def launch_progress(self, progress: LaunchProgress) -> None:
        for step in (*progress.earlier, progress.step):
            self._event(step)
        if progress.placement is not None:
            self.state.placement = progress.placement
        if progress.info is not None:
            self.state.info = progress.info
            self.state.num_nodes = len(progress.info.nodes)
        if progress.gcs_address is not None:
            self.state.gcs_address = progress.gcs_address
        if progress.touched is not None and progress.touched not in self.state.regions:
            self.state.regions.append(progress.touched)  # before anything is made there
        if progress.cleaned:
            self.state.regions = [r for r in self.state.regions if r not in progress.cleaned]
        if progress.storage:  # before they are attached: the teardown releases them
            self.state.storage = storage_steps.merged(self.state.storage, progress.storage)

    # -- the entity's life ------------------------------------------------------------
    @workflow.run
    async def run(self, request: ClusterInput) -> ClusterRecord:
        self._publish()
        self._show()
        while True:
            try:
                return await self._live()
            except asyncio.CancelledError:
                if not workflow.patched(CANCEL_TEARDOWN_PATCH):
                    raise
                with contextlib.suppress(asyncio.CancelledError):  # cancelled again: the
                    await shielded(self._down_on_cancel())  # teardown went on all the same
                if self._finished():
                    # Completed, as every torn-down cluster (cost-report reads those).
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    return self.state

    async def _down_on_cancel(self) -> None:
        """The workflow was cancelled: cut short the operation under way if it builds
        (launch, start, exec), then tear down (the cluster is TERMINATED unless that
        failed)."""
        self.cancelled = True
        self._event("workflow cancelled: tearing the cluster down")
        self._cut_short()
        async with self._turn(CANCEL_DOWN):
            if self.state.status == ClusterStatus.TERMINATED:
                return
            try:
                await self._teardown(terminate=True, purge=False)
            except ApplicationError as err:
                self.cancelled = False  # the entity stays: orch down may retry
                self._event(f"{err.message} (after the workflow was cancelled)")

    async def _live(self) -> ClusterRecord:
        """The run loop: timers, continue-as-new, and the end once TERMINATED."""
        while True:
            wake_at = self._next_wakeup()
            timeout = None if wake_at is None else max(wake_at - workflow.now(), MIN_TIMER)
            self.schedule_changed = False
            try:
                await workflow.wait_condition(
                    lambda: self._finished() or self._may_continue_as_new()
                    or self.schedule_changed,
                    timeout=timeout,
                )
            except TimeoutError:
                await self._on_timer()
                continue
            if self._finished():
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self.state
            if self._may_continue_as_new():
                workflow.continue_as_new(
                    ClusterInput(name=self.state.name, name_on_cloud=self.state.name_on_cloud,
                                 state=self.state, publish_search_attributes=self.publish)
                )

    def _finished(self) -> bool:
        return self.state.status == ClusterStatus.TERMINATED

    def _may_continue_as_new(self) -> bool:
        return (workflow.info().is_continue_as_new_suggested()
                and not self.lock.locked() and workflow.all_handlers_finished())

    # -- launch -------------------------------------------------------------------------
    @workflow.update
    async def launch(self, request: LaunchRequest) -> LaunchResult:
        async with self._turn("launch"):
            self._require_not_gone()
            task = request.task
            if self.state.status == ClusterStatus.STOPPED:
                raise ApplicationError(
                    f"cluster {self.state.name} is STOPPED; start it first (orch start)",
                    type="ClusterStopped", non_retryable=True,
                )
            reuse = self.state.status == ClusterStatus.UP
            relaunch = not reuse and self._relaunches_in_shape()
            if reuse or relaunch:
                self._require_fit(task)
            job_id = self._next_job_id() if task.run or task.setup else None
            if request.autostop is not None:
                self.state.autostop = request.autostop
            self.state.last_error = None
            self._touch()
            if not reuse and not relaunch:
                self.state.launched = Task(num_nodes=task.num_nodes, resources=task.resources)
            if task.storage_mounts:  # a start mounts them again
                self.state.launched = storage_steps.with_buckets_of(self.state.launched, task)
            try:
                await self._launch_child(LaunchInput(
                    cluster_name=self.state.name, name_on_cloud=self.state.name_on_cloud,
                    task=self._in_shape(task) if relaunch else task,
                    placement=self.state.placement,
                    reuse=self.state.info if reuse else None,
                    gcs_address=self.state.gcs_address if reuse else None,
                    job_id=job_id, retry_until_up=request.retry_until_up,
                    was_up=self.state.ever_up, requested_by=request.requested_by,
                    storage_pins=storage_steps.buckets_of(self.state.storage),
                ), reuse)
            finally:
                self._touch()
            if not reuse:
                self.state.launched_at = workflow.now()
            if job_id is not None and task.run:
                await self._submit(task, job_id)
            return LaunchResult(record=self.state, job_id=job_id, provisioned=not reuse)

    async def _launch_child(self, request: LaunchInput, reuse: bool) -> None:
        """Run LaunchWorkflow; the cluster is UP after it, or INIT (UP after a failed
        setup, since the nodes and Ray are up: SkyPilot keeps it for debugging)."""
        try:
            output = await workflow.execute_child_workflow(
                LaunchWorkflow.run, request, id=self._child_id("launch"),
                # A cluster workflow that ends (terminated) asks its launch to stop, which
                # cancels the failover, which removes the nodes it made: none is orphaned.
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=launch_summary(request.cluster_name, request.task, request.reuse),
                static_details=task_details(request.task, request.requested_by),
            )
        except ChildWorkflowError as err:
            if isinstance(err.cause, CancelledError):
                raise ApplicationError(CANCELLED_MESSAGE, type=CANCELLED,
                                       non_retryable=True) from err
            self.state.last_error = error_message(err)
            ready = self.state.gcs_address is not None and self.state.info is not None
            details = error_details(err)
            if (error_type(err) == "SetupError" and ready) or reuse:
                self._set_status(ClusterStatus.UP)
            else:
                self._set_status(ClusterStatus.INIT, reason=self.state.last_error)
                details = {**details, "hint": init_hint(self.state.name,
                                                        self.state.placement is not None)}
            raise ApplicationError(
                self.state.last_error, details,
                type=error_type(err) or "LaunchFailed", non_retryable=True,
            ) from err
        self.state.info, self.state.placement = output.info, output.placement
        self.state.gcs_address = output.gcs_address
        self.state.num_nodes = len(output.info.nodes)
        self._set_status(ClusterStatus.UP)

    @launch.validator
    def _validate_launch(self, request: LaunchRequest) -> None:
        self._require_not_gone()

    def _relaunches_in_shape(self) -> bool:
        """A launch on a cluster that has (or had) nodes, left INIT by a failed launch or a
        refresh: as SkyPilot, it keeps the cluster's nodes and resources (the task may ask
        for less, never more), rather than provisioning the task's own shape beside them."""
        return (self.state.placement is not None and self.state.launched is not None
                and workflow.patched(RELAUNCH_IN_SHAPE_PATCH))

    def _in_shape(self, task: Task) -> Task:
        """``task`` to provision with the cluster's own shape (its job still runs on the
        nodes the task asks for)."""
        assert self.state.launched is not None
        return task.model_copy(update={"num_nodes": self.state.launched.num_nodes,
                                       "resources": self.state.launched.resources})

    # -- exec ---------------------------------------------------------------------------
    @workflow.update
    async def exec(self, request: ExecRequest) -> int:
        async with self._turn("exec"):
            self._require_up()
            task = request.task
            self._require_fit(task)
            job_id = self._next_job_id()
            self._touch()
            if task.workdir or task.file_mounts:
                assert self.state.info is not None
                await workflow.execute_activity(
                    SYNC_FILES,
                    SyncRequest(info=self.state.info, workdir=task.workdir,
                                file_mounts=task.file_mounts, staged=task.staged),
                    summary=on_nodes("sync workdir and file mounts", self.state.info),
                    **LONG_CALL,
                )
            await self._submit(task, job_id)
            return job_id

    @exec.validator
    def _validate_exec(self, request: ExecRequest) -> None:
        self._require_up()

    async def _submit(self, task: Task, job_id: int) -> None:
        info, gcs_address = self.state.info, self.state.gcs_address
        assert info is not None and info.head is not None and gcs_address is not None
        self.state.step = f"submitting job {job_id}"
        spec = JobSpec.for_task(task, job_id, self.state.name, info, gcs_address)
        await workflow.execute_activity(
            SUBMIT_JOB, SubmitRequest(head=info.head, spec=spec), result_type=JobRecord,
            **CLOUD_CALL,
            summary=f"submit job {job_id}{f' ({task.name})' if task.name else ''} to the head "
                    f"{info.head.address}",
        )
        self.state.step = ""

    # -- the head's job table ------------------------------------------------------------
    @workflow.update(name=JOBS_UPDATE)
    async def jobs(self, request: JobsRequest) -> list[JobRecord]:
        """The head's job table, after the cancels ``request`` asks for (``orch queue``,
        ``orch cancel``): read by an activity on a worker, so the CLI needs no way to the
        head of its own. Takes no turn: it may run beside a launch or an exec."""
        info = self.state.info
        assert info is not None and info.head is not None
        return await workflow.execute_activity(
            HEAD_JOBS, HeadJobsRequest(head=info.head, cancel=request.cancel,
                                       cancel_all=request.cancel_all),
            result_type=list[JobRecord], **CLOUD_CALL,
            summary=("cancel jobs and read" if request.cancel or request.cancel_all
                     else "read") + f" the job table on the head {info.head.address}")

    @jobs.validator
    def _validate_jobs(self, request: JobsRequest) -> None:
        self._require_not_gone()
        if self.state.info is None or self.state.info.head is None:
            raise ApplicationError(f"cluster {self.state.name} has no head node yet "
                                   f"({self.state.status})", type="ClusterNotUp",
                                   non_retryable=True)

    # -- stop, start, down --------------------------------------------------------------
    @workflow.update
    async def stop(self, request: StopRequest) -> TeardownResult:
        async with self._turn("stop"):
            self._require_stoppable()
            return await self._teardown(terminate=False, purge=False)

    @stop.validator
    def _validate_stop(self, request: StopRequest) -> None:
        self._require_stoppable()

    @workflow.update
    async def start(self, request: StartRequest) -> ClusterRecord:
        """Resume the stopped instances where they are (their disks hold data), then Ray."""
        async with self._turn("start"):
            self._require_startable()
            assert self.state.launched is not None
            self._set_status(ClusterStatus.INIT, step="starting")
            self._touch()
            await self._launch_child(LaunchInput(
                cluster_name=self.state.name, name_on_cloud=self.state.name_on_cloud,
                task=self.state.launched,
                placement=self.state.placement, retry_until_up=request.retry_until_up,
                was_up=True, storage_pins=storage_steps.buckets_of(self.state.storage),
            ), reuse=False)
            return self.state

    @start.validator
    def _validate_start(self, request: StartRequest) -> None:
        self._require_startable()

    @workflow.update
    async def cancel_operation(self, request: CancelRequest) -> str:
        """Cut short the launch, start or exec under way and return its name ("" when none
        is): its failover removes the nodes it was making, and this returns once it has.
        The cluster stays (INIT if it never had nodes): ``orch down`` removes it."""
        if self.current is None or self.current[0] not in CANCELLABLE:
            return ""
        operation, task = self.current
        self._event(f"{operation} cancelled by its user")
        self._cut_short()
        await workflow.wait_condition(lambda: self.current is None or self.current[1] is not task)
        return operation

    @workflow.update
    async def down(self, request: DownRequest) -> TeardownResult:
        """Tear down; a launch, start or exec under way is cancelled first rather than
        waited for (a launch stuck in --retry-until-up would never end)."""
        if self.current is not None and workflow.patched(DOWN_CUTS_SHORT_PATCH):
            if self.current[0] in CANCELLABLE:
                self._event(f"{self.current[0]} cancelled by orch down")
            self._cut_short()
        async with self._turn("down"):
            if self.state.status == ClusterStatus.TERMINATED:
                return TeardownResult(message=f"Cluster {self.state.name} is already gone.")
            return await self._teardown(terminate=True, purge=request.purge)
