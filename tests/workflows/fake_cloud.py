"""Scripted fakes of orch's activities, registered under the real activity names.

The workflows under test cannot tell them from the real ones: same names, same pydantic
inputs and results, same typed ApplicationErrors. A test scripts failures per activity
(``fail``) and reads back the order of calls (``calls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orch.bulk_teardown import BULK_TEARDOWN_ID, ClusterOutcome, ClustersRequest
from orch.clouds.base import ClusterInfo, InstanceStatus, NodeInfo, ProvisionRecord
from orch.contracts.plan import PlanRequest
from orch.contracts.provision import InstancesRequest, ProvisionRequest, WaitGoneRequest
from orch.contracts.runtime import (
    HeadJobsRequest,
    HealthRequest,
    JobsActivity,
    NodesRequest,
    SetupRequest,
    StartRayRequest,
    SubmitRequest,
    SyncRequest,
)
from orch.failover_rules import Candidate
from orch.records import ClusterInput
from orch.runtime.job_records import JobRecord, JobSpec
from orch.semaphore import LAUNCH_SEMAPHORE_ID, SemaphoreSettings
from orch.status import JobStatus
from workers.registry import WORKFLOWS, client_activities
from workflows.cluster import ClusterWorkflow


class ClusterTestbed:
    """A task queue with a worker on it; remembers the clusters it started, so that they
    can be terminated when the test ends (a workflow left running with a timer and no
    worker would stall the time-skipping server for every later test)."""

    def __init__(self, env: WorkflowEnvironment, task_queue: str) -> None:
        self.env, self.task_queue = env, task_queue
        self.handles: list[WorkflowHandle] = []

    async def start_cluster(self, name: str, name_on_cloud: str = "") -> WorkflowHandle:
        handle = await self.env.client.start_workflow(
            ClusterWorkflow.run, ClusterInput(name=name, name_on_cloud=name_on_cloud,
                                              publish_search_attributes=False),
            id=f"cluster/{name}-{uuid.uuid4().hex[:6]}", task_queue=self.task_queue,
        )
        self.handles.append(handle)
        return handle

    async def terminate_all(self) -> None:
        entities = [self.env.client.get_workflow_handle(e)
                    for e in (LAUNCH_SEMAPHORE_ID, BULK_TEARDOWN_ID)]
        for handle in [*self.handles, *entities]:
            with contextlib.suppress(RPCError):  # never started: nothing to stop
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test over")


def provision_error(kind: str, code: str, scope: str) -> ApplicationError:
    """What activities/errors.py raises for a provider's typed error."""
    return ApplicationError(f"{code} (scripted)", {"code": code, "scope": scope}, type=kind,
                            non_retryable=True)


@asynccontextmanager
async def fake_cloud_worker(
    env: WorkflowEnvironment, cloud: FakeCloud, testbed: ClusterTestbed | None = None,
    semaphore: SemaphoreSettings | None = None,
) -> AsyncIterator[ClusterTestbed]:
    """A worker on a fresh task queue (or ``testbed``'s again) with orch's workflows, the
    fake cloud's activities and the real semaphore activities. Unless a testbed is passed
    in, everything it started is terminated at the end, the launch semaphore included
    (it lives on this worker's task queue)."""
    bed = testbed or ClusterTestbed(env, f"test-{uuid.uuid4().hex[:8]}")
    activities = cloud.activities() + client_activities(env.client,
                                                        semaphore or SemaphoreSettings())
    # No sticky cache: every workflow task replays the history (a determinism check on
    # every step), and a worker that stops leaves no sticky queue for the time-skipping
    # server to wait on while its clock is frozen.
    async with Worker(env.client, task_queue=bed.task_queue, workflows=WORKFLOWS,
                      activities=activities, max_cached_workflows=0):
        yield bed
    if testbed is None:
        await bed.terminate_all()


class FakeCloud:
    def __init__(self, candidates: list[Candidate] | None = None) -> None:
        self.candidates = list(candidates or [Candidate(cloud="local", region="local")])
        self.instances: dict[str, dict[str, InstanceStatus]] = defaultdict(dict)
        self.calls: list[str] = []
        self.failures: dict[str, list[ApplicationError]] = defaultdict(list)
        self.submitted: list[int] = []
        self.cancelled: set[int] = set()
        self.specs: list[JobSpec] = []  # what each submit_job was given
        self.nodes_asked: list[int] = []  # num_nodes of each run_instances
        self.gates: dict[str, asyncio.Event] = {}
        self.no_capacity: set[str] = set()  # zones
        self.capacity_returns_after: int | None = None  # after so many run_instances calls
        self.no_quota: set[str] = set()  # regions
        self.no_auth: set[str] = set()  # clouds
        self.zone_errors: dict[str, ApplicationError] = {}  # raised by every create there
        self.placements: list[tuple[str, str, str | None]] = []  # successful provisions
        self.ray_is_healthy = True
        self.jobs = JobsActivity(active=False)  # what the head's job table says (autostop)

    def fail(self, activity_name: str, error: ApplicationError, times: int = 1) -> None:
        self.failures[activity_name] += [error] * times

    def hold(self, activity_name: str) -> asyncio.Event:
        """Make ``activity_name`` wait, once entered, until the returned event is set."""
        self.gates[activity_name] = asyncio.Event()
        return self.gates[activity_name]

    async def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name in self.gates:  # held, and heartbeating as orch's own activities do
            while not self.gates[name].is_set():
                if activity.info().heartbeat_timeout:
                    activity.heartbeat(f"held: {name}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.gates[name].wait(), 1.0)
        if self.failures[name]:
            raise self.failures[name].pop(0)

    def info(self, cluster: str) -> ClusterInfo:
        nodes = [
            NodeInfo(instance_id=i, internal_ip=f"10.0.0.{n + 1}", is_head=n == 0, cpus=4,
                     memory_gb=16)
            for n, i in enumerate(sorted(self.instances[cluster]))
        ]
        return ClusterInfo(cloud="local", region="local", nodes=nodes)

    # -- the activities -----------------------------------------------------------------
    def activities(self) -> list:
        @activity.defn(name="plan_candidates")
        async def plan_candidates(request: PlanRequest) -> list[Candidate]:
            """Like the optimizer: blocked zones are dropped, and so is a candidate whose
            zones are all blocked."""
            await self._enter("plan_candidates")
            blocks = request.blocklist.blocks
            planned = []
            for c in self.candidates:
                if blocks(c.cloud, c.region, None, c.instance_type, c.use_spot):
                    continue
                zones = [z for z in c.zones
                         if not blocks(c.cloud, c.region, z, c.instance_type, c.use_spot)]
                if c.zones and not zones:
                    continue
                planned.append(c.model_copy(update={"zones": zones}))
            return planned

        @activity.defn(name="check_quota")
        async def check_quota(request: ProvisionRequest) -> None:
            await self._enter("check_quota")
            if request.cloud in self.no_auth:
                raise provision_error("AuthError", "AuthFailure", "cloud")
            if request.config.region in self.no_quota:
                raise provision_error("QuotaError", "VcpuLimitExceeded", "region")

        @activity.defn(name="run_instances")
        async def run_instances(request: ProvisionRequest) -> ProvisionRecord:
            await self._enter("run_instances")
            config = request.config
            self.nodes_asked.append(config.num_nodes)
            nodes = self.instances[config.cluster_name]
            if config.zone in self.zone_errors:
                raise self.zone_errors[config.zone]
            if len(nodes) > config.num_nodes:  # what orch.clouds.aws raises
                raise ApplicationError(
                    f"cluster {config.cluster_name} has {len(nodes)} instances, more than the "
                    f"{config.num_nodes} asked for; tear it down first",
                    {"code": "", "scope": "cloud"}, type="InvalidConfigError",
                    non_retryable=True)
            if (self.capacity_returns_after is not None
                    and self.calls.count("run_instances") > self.capacity_returns_after):
                self.no_capacity = set()
            if config.zone in self.no_capacity:
                # The head comes up, the workers do not: a partial cluster to clean up.
                nodes[f"{config.cluster_name}-0"] = InstanceStatus.RUNNING
                raise provision_error("CapacityError", "InsufficientInstanceCapacity", "zone")
            for index in range(config.num_nodes):  # resumes stopped ones, creates the rest
                nodes[f"{config.cluster_name}-{index}"] = InstanceStatus.RUNNING
            self.placements.append((request.cloud, config.region, config.zone))
            return ProvisionRecord(
                cloud=request.cloud, cluster_name=config.cluster_name, region=config.region,
                head_instance_id=f"{config.cluster_name}-0",
            )

        @activity.defn(name="wait_running")
        async def wait_running(request: InstancesRequest) -> None:
            await self._enter("wait_running")

        @activity.defn(name="get_cluster_info")
        async def get_cluster_info(request: InstancesRequest) -> ClusterInfo:
            await self._enter("get_cluster_info")
            return self.info(request.cluster_name)

        @activity.defn(name="terminate_instances")
        async def terminate_instances(request: InstancesRequest) -> list[str]:
            await self._enter("terminate_instances")
            found = sorted(self.instances[request.cluster_name])
            self.instances[request.cluster_name].clear()
            return found

        @activity.defn(name="stop_instances")
        async def stop_instances(request: InstancesRequest) -> list[str]:
            await self._enter("stop_instances")
            nodes = self.instances[request.cluster_name]
            for instance in nodes:
                nodes[instance] = InstanceStatus.STOPPED
            return sorted(nodes)

        @activity.defn(name="wait_instances_gone")
        async def wait_instances_gone(request: WaitGoneRequest) -> None:
            await self._enter("wait_instances_gone")

        @activity.defn(name="cleanup_ports")
        async def cleanup_ports(request: InstancesRequest) -> None:
            await self._enter("cleanup_ports")

        @activity.defn(name="teardown_clusters")
        async def teardown_clusters(request: ClustersRequest) -> list[ClusterOutcome]:
            """Every cluster's instances removed, as terminate_instances does; a scripted
            failure fails the whole call (the workflow tries its clusters again later)."""
            await self._enter("teardown_clusters")
            outcomes = [ClusterOutcome(cluster=c, instances=sorted(self.instances[c]))
                        for c in request.clusters]
            for cluster in request.clusters:
                self.instances[cluster].clear()
            return outcomes

        @activity.defn(name="wait_for_nodes")
        async def wait_for_nodes(request: NodesRequest) -> None:
            await self._enter("wait_for_nodes")

        @activity.defn(name="setup_runtime")
        async def setup_runtime(request: NodesRequest) -> list[str]:
            await self._enter("setup_runtime")
            return ["/opt/orch/venv/bin/python"] * len(request.info.nodes)

        @activity.defn(name="start_ray")
        async def start_ray(request: StartRayRequest) -> str:
            await self._enter("start_ray")
            return f"{request.info.nodes[0].internal_ip}:6380"

        @activity.defn(name="sync_files")
        async def sync_files(request: SyncRequest) -> None:
            await self._enter("sync_files")

        @activity.defn(name="run_setup")
        async def run_setup(request: SetupRequest) -> None:
            await self._enter("run_setup")

        @activity.defn(name="submit_job")
        async def submit_job(request: SubmitRequest) -> JobRecord:
            await self._enter("submit_job")
            self.submitted.append(request.spec.id)
            self.specs.append(request.spec)
            return JobRecord(id=request.spec.id, status=JobStatus.PENDING,
                             submitted_at=datetime(2026, 1, 1, tzinfo=UTC))

        @activity.defn(name="stop_ray")
        async def stop_ray(request: NodesRequest) -> list[str]:
            await self._enter("stop_ray")
            return []

        @activity.defn(name="query_instances")
        async def query_instances(request: InstancesRequest) -> dict[str, InstanceStatus]:
            await self._enter("query_instances")
            return dict(self.instances[request.cluster_name])

        @activity.defn(name="ray_healthy")
        async def ray_healthy(request: HealthRequest) -> bool:
            await self._enter("ray_healthy")
            return self.ray_is_healthy

        @activity.defn(name="jobs_activity")
        async def jobs_activity(request: NodesRequest) -> JobsActivity:
            await self._enter("jobs_activity")
            return self.jobs

        @activity.defn(name="head_jobs")
        async def head_jobs(request: HeadJobsRequest) -> list[JobRecord]:
            """The submitted jobs, RUNNING, or CANCELLED once a request cancelled them."""
            await self._enter("head_jobs")
            cancelled = set(self.submitted if request.cancel_all else request.cancel)
            self.cancelled |= cancelled
            return [JobRecord(id=i, status=JobStatus.CANCELLED if i in self.cancelled
                              else JobStatus.RUNNING,
                              submitted_at=datetime(2026, 1, 1, tzinfo=UTC))
                    for i in self.submitted]

        return [plan_candidates, check_quota, run_instances, wait_running, get_cluster_info,
                terminate_instances, stop_instances, wait_instances_gone, cleanup_ports,
                teardown_clusters, wait_for_nodes, setup_runtime, start_ray, sync_files,
                run_setup, submit_job, stop_ray, query_instances, ray_healthy, jobs_activity,
                head_jobs]
