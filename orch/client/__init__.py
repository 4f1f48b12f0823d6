"""The Python API of orch: launch, exec, status, queue, logs, cancel, down.

``orch.client`` is the only part of ``orch/`` that knows Temporal. Cluster operations
are Updates to the cluster's entity workflow (``cluster/<name>``), found by its
registered name. Job tables (``queue``, ``cancel``) come through the control plane: the
cluster's ``jobs`` Update, whose activity reads the head on a worker. Jobs' output comes
from the staging store, where workers copy it (``orch.client.cluster_output``,
``orch.client.managed_jobs``), never through workflow histories nor from the head.

    async with await Client.connect() as client:
        result = await client.launch(load_task("task.yaml"), "hello")
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    Client as TemporalClient,
)
from temporalio.client import (
    RPCError,
    TLSConfig,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateStage,
)
from temporalio.common import SearchAttributeKey, WorkflowIDConflictPolicy
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCStatusCode

from orch.client.attribution import requester, start_attributes
from orch.client.cluster_output import print_cluster_job_output
from orch.client.codec import CodecKeyError, orch_data_converter
from orch.client.following import OrchError, stop_following, update_failure, update_result
from orch.config import TASK_QUEUE, TemporalSettings, orch_home
from orch.fit import TASK_DOES_NOT_FIT
from orch.lifecycle import Autostop
from orch.names import InvalidNameError, check_name, control_plane_hash, name_on_cloud, name_problem
from orch.optimizer import OptimizerError, plan
from orch.records import (
    CLUSTER_WORKFLOW,
    JOBS_UPDATE,
    MANAGED_JOB_WORKFLOW,
    SA_AUTOSTOP,
    SA_CLOUD,
    SA_CLUSTER,
    SA_CLUSTER_STATUS,
    SA_JOB_ID,
    SA_NUM_NODES,
    SA_REGION,
    SA_RESOURCES,
    AutostopRequest,
    CancelRequest,
    ClusterInput,
    ClusterRecord,
    DownRequest,
    ExecRequest,
    JobsRequest,
    LaunchRequest,
    LaunchResult,
    StartRequest,
    StopRequest,
    TeardownResult,
    cluster_workflow_id,
)
from orch.runtime.job_records import JobRecord
from orch.server import ControlPlane
from orch.settings import load_settings
from orch.spec import Task
from orch.staging import stage_task
from orch.status import ClusterStatus
from orch.storage.errors import StorageError
from orch.summaries import cluster_summary, task_details

CONNECT_TIMEOUT_S = 60
PROGRESS_POLL_S = 0.5
INVALID_RESOURCES = "InvalidResources"  # an OrchError kind: the user's request, not a failure
USER_ERRORS = frozenset({INVALID_RESOURCES, TASK_DOES_NOT_FIT})  # kinds the CLI exits 2 for
SERVER_ERRORS = (RPCError,)  # what the Temporal server may answer instead of a result


class ClusterSummary(BaseModel):
    name: str
    status: ClusterStatus
    cloud: str
    region: str
    num_nodes: int
    resources: str
    launched_at: datetime | None = None
    job_id: str | None = None  # set for a managed job's cluster
    autostop: str = ""  # e.g. "down after 30 min idle, at 2026-11-29 17:30 UTC"


def _read_pem(variable: str, path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise OrchError(f"{variable}={path}: {err.strerror}", "InvalidSettings") from None


def tls_option(settings: TemporalSettings) -> TLSConfig | bool | None:
    """What ``TemporalClient.connect`` gets as ``tls``: a TLSConfig when certificates are
    named (mTLS, or a private CA), else ``settings.tls``; None lets the SDK turn TLS on
    exactly when an API key is sent (Temporal Cloud)."""
    if settings.tls_key and not settings.tls_cert:
        raise OrchError("TEMPORAL_TLS_KEY is set without TEMPORAL_TLS_CERT", "InvalidSettings")
    if settings.tls is not False and (settings.tls_cert or settings.tls_ca):
        return TLSConfig(server_root_ca_cert=_read_pem("TEMPORAL_TLS_CA", settings.tls_ca),
                         client_cert=_read_pem("TEMPORAL_TLS_CERT", settings.tls_cert),
                         client_private_key=_read_pem("TEMPORAL_TLS_KEY", settings.tls_key))
    return settings.tls


@functools.cache
def quiet_runtime() -> Runtime:
    """The SDK runtime of orch's clients: the SDK core logs errors only, not a WARN line
    per retried call while a control plane restarts (``update_result`` says so once, in
    words); workers keep the default, whose warnings belong in their log."""
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(
        filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))))


async def connect_temporal(settings: TemporalSettings, timeout_s: float = CONNECT_TIMEOUT_S,
                           runtime: Runtime | None = None) -> TemporalClient:
    """Connect with retries (a dev server that just opened its port may not serve yet),
    with orch's data converter (``orch.client.codec``: secrets are encrypted)."""
    assert settings.address
    tls = tls_option(settings)
    try:
        converter = orch_data_converter()
    except CodecKeyError as err:
        raise OrchError(str(err), "InvalidSettings") from None
    api_key = os.environ.get(settings.api_key_env) or None
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return await TemporalClient.connect(
                settings.address, namespace=settings.namespace, tls=tls, api_key=api_key,
                data_converter=converter, runtime=runtime,
            )
        except RuntimeError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


def new_cluster_name() -> str:
    """The name of a cluster launched without one (SkyPilot's ``sky-xxxx`` habit)."""
    return f"orch-{secrets.token_hex(3)}"


class Client:
    def __init__(self, temporal: TemporalClient, task_queue: str = TASK_QUEUE,
                 server: str | None = None):
        self.temporal = temporal
        self.task_queue = task_queue
        self.ui_url: str | None = None
        self.refreshed: dict[str, ClusterRecord] = {}  # the last status(refresh=True)'s
        # Which control plane this is, for orch.names.control_plane_hash.
        self.server = server or f"{temporal.service_client.config.target_host}/{temporal.namespace}"
        self._plane_hash: str | None = None

    @property
    def plane_hash(self) -> str:
        """The control plane's hash in the names on cloud of what this client creates."""
        if self._plane_hash is None:
            self._plane_hash = control_plane_hash(orch_home(), self.server)
        return self._plane_hash

    @classmethod
    async def connect(cls, settings: TemporalSettings | None = None) -> Client:
        """Use the config's Temporal server (``TEMPORAL_ADDRESS`` wins) when there is one;
        otherwise start (or reuse) the embedded control plane under ``$ORCH_HOME``."""
        settings = settings or load_settings().temporal_settings()
        ui_url, server = None, f"{settings.address}/{settings.namespace}"
        if not settings.address:
            state = await asyncio.to_thread(ControlPlane().ensure)
            settings = settings.model_copy(update={"address": state.address})
            ui_url, server = state.ui_url, "embedded"  # its port may change across restarts
        client = cls(await connect_temporal(settings, runtime=quiet_runtime()), server=server)
        client.ui_url = ui_url
        return client

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Nothing to release today; kept so callers can shut down cleanly (sdk-python#300)."""

    # -- clusters -----------------------------------------------------------------------
    def _handle(self, cluster: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(cluster_workflow_id(cluster))

    async def record(self, cluster: str) -> ClusterRecord | None:
        """The cluster's record, or None when no such cluster is running."""
        handle = self._handle(cluster)
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if description.status != WorkflowExecutionStatus.RUNNING:
            return None
        record: ClusterRecord = await handle.query("record", result_type=ClusterRecord)
        return None if record.status == ClusterStatus.TERMINATED else record

    async def _require(self, cluster: str) -> ClusterRecord:
        record = await self.record(cluster)
        if record is None:
            problem = name_problem(cluster)
            if problem is not None:  # no such cluster, and none could have that name
                raise InvalidNameError("cluster", "", "cluster name", problem)
            raise OrchError(f"cluster {cluster} does not exist", "NoSuchCluster")
        return record

    async def launch(
        self,
        task: Task,
        cluster: str | None = None,
        on_step: Callable[[str], None] | None = None,
        *,
        retry_until_up: bool = False,
        autostop: Autostop | None = None,
    ) -> LaunchResult:
        """Launch ``task`` on ``cluster`` (created, or reused when UP); returns once the job
        is submitted. ``on_step`` is told each step and failover hop as it happens."""
        cluster = check_name(cluster or new_cluster_name(), "cluster")
        self.validate(task)
        task = await self.stage(task, on_step)
        user, summary = requester(), cluster_summary(cluster, task)
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            CLUSTER_WORKFLOW,
            ClusterInput(name=cluster, name_on_cloud=name_on_cloud(cluster, self.plane_hash)),
            id=cluster_workflow_id(cluster),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=start_attributes(user, summary),
            static_summary=summary,
            static_details=task_details(task, user),
        )
        existing = await self.record(cluster)
        seen = existing.event_count if existing else 0
        request = self.launch_request(task, retry_until_up=retry_until_up, autostop=autostop,
                                      new_cluster=existing is None)
        request.requested_by = user
        try:
            update = await self.temporal.start_update_with_start_workflow(
                "launch", request, start_workflow_operation=start,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=LaunchResult,
            )
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        result: LaunchResult = await self._await_with_progress(cluster, update, on_step, seen)
        return result

    @staticmethod
    def launch_request(task: Task, *, retry_until_up: bool, autostop: Autostop | None,
                       new_cluster: bool) -> LaunchRequest:
        """The autostop given (the -i flags), else the task's ``resources.autostop``, as
        SkyPilot does; a cluster the launch creates gets the config's default when neither
        says one; a reused cluster otherwise keeps its own (``orch autostop`` may have set it)."""
        autostop = autostop or task.resources.autostop
        if new_cluster:
            autostop = load_settings().launch_autostop(autostop)
        return LaunchRequest(task=task, retry_until_up=retry_until_up, autostop=autostop)

    @staticmethod
    def validate(task: Task) -> None:
        """Refuse, before anything starts, a task no cloud in the catalog could run (unknown
        names get "did you mean"), or one the config's ``allowed_clouds`` exclude (a broken
        config raises its :class:`orch.settings.ConfigError`). Credentials are the worker's
        business, checked there."""
        try:
            plan(task, allowed_clouds=load_settings().allowed_clouds)
        except OptimizerError as err:
            raise OrchError(str(err), INVALID_RESOURCES) from None

    @staticmethod
    async def stage(task: Task, on_step: Callable[[str], None] | None = None) -> Task:
        """``task`` with its workdir and local file mounts uploaded to the staging store
        (``orch.staging``), where every worker reads them; a failure is an OrchError."""
        try:
            staged, reports = await asyncio.to_thread(stage_task, task,
                                                      load_settings().staging)
        except StorageError as err:
            raise OrchError(f"staging the task's files: {err.message}", "StagingFailed"
                            ) from None
        for report in reports:
            done = ("already staged" if report.reused
                    else f"{report.uploaded} of {report.files} file(s) uploaded")
            if on_step is not None:
                on_step(f"staged {report.source} in {report.tree.root.uri} ({done})")
        return staged

    async def _await_with_progress(
        self, cluster: str, update: WorkflowUpdateHandle[Any],
        on_step: Callable[[str], None] | None, seen: int,
    ) -> Any:
        """Await an update's result, telling ``on_step`` of each new event of the cluster
        and riding out a control plane that restarts meanwhile."""
        result = asyncio.ensure_future(update_result(update, on_step))

        async def report() -> None:
            nonlocal seen
            if on_step is None:
                return
            try:
                record = await self._handle(cluster).query(
                    "record", result_type=ClusterRecord, rpc_timeout=timedelta(seconds=3)
                )
            except RPCError:
                return  # no worker answering right now; the operation goes on
            for event in record.events_since(seen):
                on_step(event)
            seen = record.event_count

        try:
            while True:
                done, _ = await asyncio.wait({result}, timeout=PROGRESS_POLL_S)
                await report()
                if done:
                    return result.result()
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        finally:
            stop_following(result)

    async def _update(self, cluster: str, name: str, request: Any, result_type: type,
                      on_step: Callable[[str], None] | None = None) -> Any:
        """Send an Update to an existing cluster, with progress; errors become OrchError."""
        record = await self._require(cluster)
        try:
            update = await self._handle(cluster).start_update(
                name, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=result_type,
            )
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        return await self._await_with_progress(cluster, update, on_step, record.event_count)

    async def stop(self, cluster: str, on_step: Callable[[str], None] | None = None
                   ) -> TeardownResult:
        """Stop Ray and the instances; the disks are kept for `start`."""
        result: TeardownResult = await self._update(cluster, "stop", StopRequest(),
                                                    TeardownResult, on_step)
        return result

    async def start(self, cluster: str, on_step: Callable[[str], None] | None = None,
                    retry_until_up: bool = False) -> ClusterRecord:
        """Resume a stopped cluster where it is (no failover), and Ray on it."""
        record: ClusterRecord = await self._update(
            cluster, "start", StartRequest(retry_until_up=retry_until_up), ClusterRecord,
            on_step)
        return record

    async def set_autostop(self, cluster: str, setting: Autostop | None) -> ClusterRecord:
        """Stop (or down) the cluster after idle minutes; None cancels."""
        record: ClusterRecord = await self._update(
            cluster, "set_autostop", AutostopRequest(setting=setting), ClusterRecord)
        return record

    async def refresh(self, cluster: str) -> ClusterRecord:
        """Check the cluster's record against its cloud (and Ray); returns the result."""
        record: ClusterRecord = await self._update(cluster, "refresh", None, ClusterRecord)
        return record

    async def exec(self, cluster: str, task: Task) -> int:
        """Submit ``task``'s run command as a new job on an UP cluster; returns its id."""
        await self._require(cluster)
        task = await self.stage(task)
        try:
            job_id: int = await self._handle(cluster).execute_update(
                "exec", ExecRequest(task=task), result_type=int
            )
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        return job_id

    async def cancel_operation(self, cluster: str) -> str:
        """Cut short the cluster's launch, start or exec under way; returns its name, or ""
        when none was (the nodes it was making are removed by the time this returns)."""
        try:
            cut: str = await self._handle(cluster).execute_update(
                "cancel_operation", CancelRequest(), result_type=str)
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        return cut

    async def down(self, cluster: str, purge: bool = False) -> TeardownResult | None:
        """Tear the cluster down; None when there is no such cluster (nothing is done)."""
        if await self.record(cluster) is None:
            return None
        try:
            result: TeardownResult = await self._handle(cluster).execute_update(
                "down", DownRequest(purge=purge), result_type=TeardownResult
            )
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        return result

    async def status(self, refresh: bool = False) -> list[ClusterSummary]:
        """Every live cluster, from one visibility query over search attributes; with
        ``refresh``, each cluster's record is first checked against its cloud."""
        if refresh:
            names = [c.name for c in await self.status() if not c.job_id]
            records = await asyncio.gather(*(self.refresh(n) for n in names),
                                           return_exceptions=True)
            self.refreshed = {r.name: r for r in records if isinstance(r, ClusterRecord)}
        query = (f"ExecutionStatus = 'Running' AND (WorkflowType = '{CLUSTER_WORKFLOW}' "
                 f"OR WorkflowType = '{MANAGED_JOB_WORKFLOW}')")
        summaries = []
        async for execution in self.temporal.list_workflows(query):
            attrs = execution.typed_search_attributes
            name = attrs.get(SearchAttributeKey.for_keyword(SA_CLUSTER))
            status = attrs.get(SearchAttributeKey.for_keyword(SA_CLUSTER_STATUS))
            if refresh and name in self.refreshed:  # visibility may not have caught up yet
                status = self.refreshed[name].status
            if not name or not status or status == ClusterStatus.TERMINATED:
                continue
            summaries.append(ClusterSummary(
                name=name,
                status=ClusterStatus(status),
                cloud=attrs.get(SearchAttributeKey.for_keyword(SA_CLOUD)) or "",
                region=attrs.get(SearchAttributeKey.for_keyword(SA_REGION)) or "",
                num_nodes=attrs.get(SearchAttributeKey.for_int(SA_NUM_NODES)) or 0,
                resources=attrs.get(SearchAttributeKey.for_keyword(SA_RESOURCES)) or "",
                launched_at=execution.start_time,
                job_id=attrs.get(SearchAttributeKey.for_keyword(SA_JOB_ID)),
                autostop=attrs.get(SearchAttributeKey.for_keyword(SA_AUTOSTOP)) or "",
            ))
        return sorted(summaries, key=lambda s: s.name)

    # -- jobs (read on the head) --------------------------------------------------------
    async def _job_table(self, cluster: str, request: JobsRequest) -> list[JobRecord]:
        """The head's job table, read by a worker (the cluster's ``jobs`` Update)."""
        await self._require(cluster)
        try:
            jobs: list[JobRecord] = await self._handle(cluster).execute_update(
                JOBS_UPDATE, request, result_type=list[JobRecord])
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        return jobs

    async def queue(self, cluster: str) -> list[JobRecord]:
        return await self._job_table(cluster, JobsRequest())

    async def job(self, cluster: str, job_id: int) -> JobRecord | None:
        return next((j for j in await self.queue(cluster) if j.id == job_id), None)

    async def cancel(
        self, cluster: str, job_ids: list[int] | None = None, all_jobs: bool = False
    ) -> list[JobRecord]:
        return await self._job_table(cluster, JobsRequest(cancel=job_ids or [],
                                                          cancel_all=all_jobs))

    async def logs(
        self, cluster: str, job_id: int, follow: bool = True,
        on_line: Callable[[str], None] = print,
    ) -> JobRecord:
        """Stream the job's output from the staging store (until it ends, with
        ``follow``; ``orch.client.cluster_output``); returns its record."""
        cluster_record = await self._require(cluster)
        job = await self.job(cluster, job_id)
        if job is None:
            raise OrchError(f"cluster {cluster} has no job {job_id}", "NoSuchJob")
        await print_cluster_job_output(self.temporal, self.task_queue, cluster_record, job,
                                       follow, on_line)
        record = await self.job(cluster, job_id)
        if record is None:
            raise OrchError(f"cluster {cluster} has no job {job_id}", "NoSuchJob")
        return record
