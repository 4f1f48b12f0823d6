"""ClusterWorkflow ``cluster/<name>``: the entity that owns one cluster.

Every operation on the cluster is an Update, serialized by one lock, so launch, exec
and down never race (no file locks). Launch and teardown run as child workflows. The
record lives in one model that continue-as-new carries whole, and the fields `orch
status` lists are search attributes, so listing clusters is one visibility query.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.runtime import SubmitRequest, SyncRequest, submit_job, sync_files
    from orch.fit import misfit
    from orch.records import (
        CLUSTER_WORKFLOW,
        SA_CLOUD,
        SA_CLUSTER,
        SA_CLUSTER_STATUS,
        SA_NUM_NODES,
        SA_REGION,
        SA_RESOURCES,
        ClusterInput,
        ClusterRecord,
        DownRequest,
        ExecRequest,
        LaunchInput,
        LaunchRequest,
        LaunchResult,
        TeardownInput,
        TeardownResult,
    )
    from orch.runtime.jobs import WORKDIR, JobSpec
    from orch.spec import Task
    from orch.status import ClusterStatus
    from workflows.launch import PROGRESS_SIGNAL, LaunchProgress, LaunchWorkflow
    from workflows.options import (
        CLOUD_CALL,
        LONG_CALL,
        error_details,
        error_message,
        error_type,
    )
    from workflows.teardown import TeardownWorkflow

DEFAULT_CPUS_PER_NODE = 0.5  # a job's bundle when the task names no CPUs


def resources_summary(record: ClusterRecord) -> str:
    if record.placement is None or record.info is None or not record.info.nodes:
        return ""
    node, placement = record.info.nodes[0], record.placement
    what = placement.instance_type or f"{node.cpus:g} CPU, {node.memory_gb:g} GB"
    spot = ", spot" if placement.use_spot else ""
    return f"{len(record.info.nodes)}x {placement.cloud}({what}{spot})"


@workflow.defn(name=CLUSTER_WORKFLOW)
class ClusterWorkflow:
    @workflow.init
    def __init__(self, request: ClusterInput) -> None:
        self.state = request.state or ClusterRecord(name=request.name)
        self.publish = request.publish_search_attributes
        self.lock = asyncio.Lock()
        self.operations = 0

    # -- queries and signals ----------------------------------------------------------
    @workflow.query
    def record(self) -> ClusterRecord:
        return self.state

    @workflow.signal(name=PROGRESS_SIGNAL)
    def launch_progress(self, progress: LaunchProgress) -> None:
        self.state.step = progress.step
        if progress.placement is not None:
            self.state.placement = progress.placement
        if progress.info is not None:
            self.state.info = progress.info
            self.state.num_nodes = len(progress.info.nodes)
        if progress.gcs_address is not None:
            self.state.gcs_address = progress.gcs_address

    # -- the entity's life ------------------------------------------------------------
    @workflow.run
    async def run(self, request: ClusterInput) -> ClusterRecord:
        self._publish()
        await workflow.wait_condition(
            lambda: (self.state.status == ClusterStatus.TERMINATED
                     or workflow.info().is_continue_as_new_suggested())
            and workflow.all_handlers_finished()
        )
        if self.state.status != ClusterStatus.TERMINATED:
            workflow.continue_as_new(
                ClusterInput(name=self.state.name, state=self.state,
                             publish_search_attributes=self.publish)
            )
        return self.state

    def _publish(self) -> None:
        if not self.publish:
            return  # the time-skipping test server has no custom search attributes
        placement = self.state.placement
        workflow.upsert_search_attributes([
            SearchAttributeKey.for_keyword(SA_CLUSTER).value_set(self.state.name),
            SearchAttributeKey.for_keyword(SA_CLUSTER_STATUS).value_set(self.state.status),
            SearchAttributeKey.for_keyword(SA_CLOUD).value_set(
                placement.cloud if placement else ""),
            SearchAttributeKey.for_keyword(SA_REGION).value_set(
                placement.region if placement else ""),
            SearchAttributeKey.for_int(SA_NUM_NODES).value_set(self.state.num_nodes),
            SearchAttributeKey.for_keyword(SA_RESOURCES).value_set(self.state.task_resources),
        ])

    def _set_status(self, status: ClusterStatus, step: str = "") -> None:
        self.state.status = status
        self.state.step = step
        self.state.task_resources = resources_summary(self.state)
        self._publish()

    def _child_id(self, kind: str) -> str:
        self.operations += 1
        info = workflow.info()
        return f"{info.workflow_id}/{kind}-{info.run_id[:8]}-{self.operations}"

    def _next_job_id(self) -> int:
        job_id = self.state.next_job_id
        self.state.next_job_id += 1
        return job_id

    # -- launch -------------------------------------------------------------------------
    @workflow.update
    async def launch(self, request: LaunchRequest) -> LaunchResult:
        async with self.lock:
            self._require_not_gone()
            task = request.task
            if self.state.status == ClusterStatus.STOPPED:
                raise ApplicationError(
                    f"cluster {self.state.name} is STOPPED; start it first (orch start)",
                    type="ClusterStopped", non_retryable=True,
                )
            reuse = self.state.status == ClusterStatus.UP
            if reuse:
                self._require_fit(task)
            job_id = self._next_job_id() if task.run or task.setup else None
            self.state.last_error = None
            try:
                output = await workflow.execute_child_workflow(
                    LaunchWorkflow.run,
                    LaunchInput(
                        cluster_name=self.state.name, task=task,
                        placement=self.state.placement,
                        reuse=self.state.info if reuse else None,
                        gcs_address=self.state.gcs_address if reuse else None,
                        job_id=job_id,
                    ),
                    id=self._child_id("launch"),
                )
            except ChildWorkflowError as err:
                self.state.last_error = error_message(err)
                ready = self.state.gcs_address is not None and self.state.info is not None
                # A failed setup leaves the cluster up, for debugging (SkyPilot does too).
                if error_type(err) == "SetupError" and ready:
                    self._set_status(ClusterStatus.UP)
                else:
                    self._set_status(ClusterStatus.UP if reuse else ClusterStatus.INIT)
                raise ApplicationError(
                    self.state.last_error, error_details(err),
                    type=error_type(err) or "LaunchFailed", non_retryable=True,
                ) from err
            self.state.info, self.state.placement = output.info, output.placement
            self.state.gcs_address = output.gcs_address
            self.state.num_nodes = len(output.info.nodes)
            if not reuse:
                self.state.launched_at = workflow.now()
            self._set_status(ClusterStatus.UP)
            if job_id is not None and task.run:
                await self._submit(task, job_id)
            return LaunchResult(record=self.state, job_id=job_id, provisioned=not reuse)

    @launch.validator
    def _validate_launch(self, request: LaunchRequest) -> None:
        self._require_not_gone()

    # -- exec ---------------------------------------------------------------------------
    @workflow.update
    async def exec(self, request: ExecRequest) -> int:
        async with self.lock:
            self._require_up()
            task = request.task
            self._require_fit(task)
            job_id = self._next_job_id()
            if task.workdir or task.file_mounts:
                assert self.state.info is not None
                await workflow.execute_activity(
                    sync_files,
                    SyncRequest(info=self.state.info, workdir=task.workdir,
                                file_mounts=task.file_mounts),
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
        spec = JobSpec(
            id=job_id, name=task.name, run=task.run or "", envs=task.envs,
            num_nodes=task.num_nodes, cluster_ips=[n.internal_ip for n in info.nodes],
            cluster_name=self.state.name,
            cpus_per_node=task.resources.min_cpus() or DEFAULT_CPUS_PER_NODE,
            workdir=WORKDIR, gcs_address=gcs_address,
        )
        await workflow.execute_activity(
            submit_job, SubmitRequest(head=info.head, spec=spec), **CLOUD_CALL
        )
        self.state.step = ""

    # -- down ---------------------------------------------------------------------------
    @workflow.update
    async def down(self, request: DownRequest) -> TeardownResult:
        async with self.lock:
            if self.state.status == ClusterStatus.TERMINATED:
                return TeardownResult(message=f"Cluster {self.state.name} is already gone.")
            self.state.step = "tearing down"
            teardown = TeardownInput(
                cluster_name=self.state.name, placement=self.state.placement,
                info=self.state.info, terminate=True,
            )
            try:
                result = await workflow.execute_child_workflow(
                    TeardownWorkflow.run, teardown, id=self._child_id("down")
                )
            except ChildWorkflowError as err:
                if not request.purge:
                    self.state.step = ""
                    self.state.last_error = error_message(err)
                    raise ApplicationError(
                        f"teardown of {self.state.name} failed: {self.state.last_error}. "
                        "Retry, or use --purge to forget the cluster anyway.",
                        type="TeardownFailed", non_retryable=True,
                    ) from err
                result = TeardownResult(
                    message=f"Cluster {self.state.name} forgotten (--purge).",
                    warnings=[f"teardown failed: {error_message(err)}; instances tagged "
                              f"orch-cluster={self.state.name} may remain on "
                              f"{self.state.placement.cloud if self.state.placement else '?'}"],
                )
            self._set_status(ClusterStatus.TERMINATED)
            return result

    # -- guards -------------------------------------------------------------------------
    def _require_not_gone(self) -> None:
        if self.state.status == ClusterStatus.TERMINATED:
            raise ApplicationError(
                f"cluster {self.state.name} is being torn down; try again in a moment",
                type="ClusterGone", non_retryable=True,
            )

    def _require_up(self) -> None:
        if self.state.status != ClusterStatus.UP:
            raise ApplicationError(
                f"cluster {self.state.name} is {self.state.status}, not UP",
                type="ClusterNotUp", non_retryable=True,
            )

    def _require_fit(self, task: Task) -> None:
        reason = misfit(task, self.state)
        if reason:
            raise ApplicationError(reason, type="TaskDoesNotFit", non_retryable=True)
