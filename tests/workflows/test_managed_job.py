"""ManagedJobWorkflow (and the job-id allocator) on the time-skipping test server.

Every activity is a scripted fake registered under the real name (FakeCloud's, plus what
managed jobs need on top: ``JobCloud`` below): regions without capacity, preemption
(the cluster's instances disappear, as a reclaimed spot instance does), setup failures,
and jobs whose end the test scripts. The launch semaphore is the real one.

Simulated time passes in two ways: the job's own durable timers (backoff) skip while the
test awaits a result, and a "long" job's watch passes its hours by failing once per six
simulated hours with ``next_retry_delay`` (the worker watching it restarted), resuming
from its heartbeat details each time, as the real watch does after a worker dies.

At the end, the real ``watch_job`` activity runs (ActivityEnvironment) against real
local-cloud nodes whose job table the test writes: copying output, resuming from its
heartbeat details, and telling a lost cluster from a failed job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import shutil
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

import activities.bulk_teardown as bulk_teardown_activities
from activities.managed_job import (
    WatchOutcome,
    WatchProgress,
    WatchRequest,
    WatchResult,
    watch_job,
)
from activities.plan import PlanRequest
from activities.provision import InstancesRequest, ProvisionRequest
from activities.runtime import SetupRequest, StartRayRequest, SubmitRequest
from orch.bulk_teardown import BULK_TEARDOWN_ID, CANCEL_JOBS_SIGNAL, CancelJobs
from orch.client import Client as OrchClient
from orch.client.bulk_teardown import cancel_for_bulk_teardown, signal_bulk_teardown
from orch.client.managed_jobs import ManagedJobs
from orch.clouds.base import InstanceStatus, NodeInfo, ProvisionConfig, ProvisionRecord
from orch.clouds.local import REGION, LocalProvider
from orch.config import orch_home
from orch.failover_rules import Candidate
from orch.job_output import OutputReader, cluster_job_output
from orch.managed_jobs import (
    BACKOFF_INITIAL_S,
    JOB_REVISION,
    STATE_QUERY,
    EventKind,
    JobIdsInput,
    LaunchFailure,
    ManagedJobInput,
    ManagedJobState,
    ManagedJobStatus,
    ScheduleState,
    attempt_log_path,
    backoff_seconds,
    classify_launch_failure,
    managed_job_workflow_id,
    recovery_plan,
)
from orch.records import FAILOVER_WORKFLOW, LAUNCH_WORKFLOW, Placement
from orch.runtime.job_records import JobRecord
from orch.semaphore import (
    LAUNCH_SEMAPHORE_ID,
    PERMITS_QUERY,
    PermitLimits,
    SemaphoreSettings,
    SemaphoreView,
)
from orch.spec import Resources, Task
from orch.status import JobStatus
from tests.workflows.fake_cloud import FakeCloud
from tests.workflows.histories import save_with_children
from workers.registry import WORKFLOWS, client_activities
from workflows.managed_job import ManagedJobWorkflow
from workflows.managed_job_ids import ManagedJobIdsWorkflow

EAST, WEST = "us-east-1", "us-west-2"
JOB_IDS = itertools.count(1001)  # workflow ids stay unique across the session's tests
WATCH_STEP_H = 6  # simulated hours one attempt of a long job's watch lasts


@dataclass
class JobPlan:
    """How one job submitted to a fake cluster behaves."""

    end: JobStatus | None = None  # None: runs until the test decides
    after_hours: int = 0  # simulated hours it runs before ending (a multiple of WATCH_STEP_H)
    preempted: bool = False  # at the end, the cluster is lost instead
    starve_for: timedelta | None = None  # after a preemption, no capacity anywhere this long


class JobCloud:
    """FakeCloud with two AWS regions (east cheaper), per-cluster job scripts, capacity
    that can be missing, preemption, and activities the test can hold."""

    def __init__(self, env: WorkflowEnvironment) -> None:
        self.env = env
        self.base = FakeCloud([
            Candidate(cloud="aws", region=EAST, instance_type="m5.large", price_per_hour=1.0),
            Candidate(cloud="aws", region=WEST, instance_type="m5.large", price_per_hour=2.0),
        ])
        self.launches: list[tuple[str, str]] = []  # (cluster, region) per provisioning
        self.starved: set[str] = set()  # clusters that find no capacity anywhere
        self.full_regions: set[str] = set()  # regions where nobody finds capacity
        self.capacity_back_at: datetime | None = None  # no capacity anywhere until then
        self.plans: dict[str, list[JobPlan]] = defaultdict(list)  # per cluster, per submit
        self.jobs: dict[tuple[str, int], JobPlan] = {}  # submitted (cluster, job id)
        self.ended: dict[tuple[str, int], JobStatus] = {}
        self.setup_failures: dict[str, int] = defaultdict(int)
        self.refused: set[str] = set()  # clusters whose head refuses every job
        self.held: dict[str, asyncio.Event] = {}

    @property
    def instances(self) -> dict[str, dict[str, InstanceStatus]]:
        return self.base.instances

    def preempt(self, cluster: str) -> None:
        self.instances[cluster].clear()

    def finish(self, cluster: str, job_id: int = 1,
               status: JobStatus = JobStatus.SUCCEEDED) -> None:
        self.ended[(cluster, job_id)] = status

    def hold(self, activity_name: str) -> asyncio.Event:
        """Make every call of the activity wait until the returned event is set."""
        self.held[activity_name] = asyncio.Event()
        return self.held[activity_name]

    async def _enter(self, name: str) -> None:
        self.base.calls.append(name)
        await self._wait_if_held(name)

    async def _wait_if_held(self, name: str) -> None:
        """A held activity waits, heartbeating so that it hears of its cancellation (an
        activity the server still counts as running would stop the test server's clock
        until the test ends)."""
        held = self.held.get(name)
        while held is not None and not held.is_set():
            activity.heartbeat()
            await asyncio.sleep(0.02)

    def _holdable(self, fn: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
        """FakeCloud's activity ``fn``, made to wait while the test holds it."""
        name = getattr(fn, "__temporal_activity_definition").name

        @functools.wraps(fn)
        async def held(*args: object) -> object:
            result = await fn(*args)  # records the call, as FakeCloud does
            await self._wait_if_held(name)
            return result

        del held.__dict__["__temporal_activity_definition"]  # copied by wraps
        return activity.defn(name=name)(held)

    def calls(self, name: str) -> int:
        return self.base.calls.count(name)

    async def _no_capacity(self, cluster: str) -> bool:
        if cluster in self.starved:
            return True
        return (self.capacity_back_at is not None
                and await self.env.get_current_time() < self.capacity_back_at)

    def activities(self) -> list:
        replaced = {"plan_candidates", "run_instances", "wait_running", "start_ray",
                    "run_setup", "submit_job"}
        kept = [self._holdable(a) for a in self.base.activities()
                if getattr(a, "__temporal_activity_definition").name not in replaced]

        @activity.defn(name="plan_candidates")
        async def plan_candidates(request: PlanRequest) -> list[Candidate]:
            await self._enter("plan_candidates")
            pin = request.placement
            found = [c for c in self.base.candidates
                     if (pin is None or (c.cloud, c.region) == (pin.cloud, pin.region))
                     and not request.blocklist.blocks(c.cloud, c.region, None,
                                                      c.instance_type, c.use_spot)]
            if not found:  # what the optimizer says when everything is ruled out
                raise ApplicationError("no candidate left", type="NoCandidatesError",
                                       non_retryable=True)
            return found

        @activity.defn(name="run_instances")
        async def run_instances(request: ProvisionRequest) -> ProvisionRecord:
            await self._enter("run_instances")
            config = request.config
            if (config.region in self.full_regions
                    or await self._no_capacity(config.cluster_name)):
                raise ApplicationError(
                    "We currently do not have sufficient m5.large capacity",
                    {"code": "InsufficientInstanceCapacity", "scope": "zone"},
                    type="CapacityError", non_retryable=True,
                )
            nodes = self.instances[config.cluster_name]
            for index in range(config.num_nodes):
                nodes.setdefault(f"{config.cluster_name}-{index}", InstanceStatus.RUNNING)
            self.launches.append((config.cluster_name, config.region))
            return ProvisionRecord(cloud=request.cloud, cluster_name=config.cluster_name,
                                   region=config.region,
                                   head_instance_id=f"{config.cluster_name}-0")

        @activity.defn(name="wait_running")
        async def wait_running(request: InstancesRequest) -> None:
            await self._enter("wait_running")

        @activity.defn(name="start_ray")
        async def start_ray(request: StartRayRequest) -> str:
            await self._enter("start_ray")
            return f"{request.info.nodes[0].internal_ip}:6380"

        @activity.defn(name="run_setup")
        async def run_setup(request: SetupRequest) -> None:
            await self._enter("run_setup")
            if self.setup_failures[request.cluster_name] > 0:
                self.setup_failures[request.cluster_name] -= 1
                assert request.job_id is not None  # recorded FAILED_SETUP on the head
                self.ended[(request.cluster_name, request.job_id)] = JobStatus.FAILED_SETUP
                raise ApplicationError("setup failed on rank 0 with exit code 1",
                                       {"tail": "(setup, rank=0) boom"}, type="SetupError",
                                       non_retryable=True)

        @activity.defn(name="submit_job")
        async def submit_job(request: SubmitRequest) -> JobRecord:
            await self._enter("submit_job")
            cluster = request.spec.cluster_name
            if cluster in self.refused:
                raise ApplicationError("the head refused the job: no Ray cluster here",
                                       type="CommandError", non_retryable=True)
            scripts = self.plans[cluster]
            self.jobs[(cluster, request.spec.id)] = scripts.pop(0) if scripts else JobPlan()
            return JobRecord(id=request.spec.id, status=JobStatus.PENDING,
                             submitted_at=await self.env.get_current_time())

        @activity.defn(name="watch_job")
        async def watch_job(request: WatchRequest) -> WatchResult:
            await self._enter("watch_job")
            key = (request.cluster_name, request.cluster_job_id)
            plan = self.jobs.get(key, JobPlan())
            details = activity.info().heartbeat_details
            hours = details[0]["hours"] if details else 0
            if hours < plan.after_hours:
                activity.heartbeat({"hours": hours + WATCH_STEP_H})
                raise ApplicationError("the worker watching this job restarted",
                                       type="WorkerLost",
                                       next_retry_delay=timedelta(hours=WATCH_STEP_H))
            if plan.preempted:
                self.preempt(request.cluster_name)
                if plan.starve_for is not None:
                    self.capacity_back_at = await self.env.get_current_time() + plan.starve_for
            while True:
                nodes = self.instances[request.name_on_cloud or request.cluster_name]
                if len(nodes) < request.num_nodes:
                    return WatchResult(outcome=WatchOutcome.CLUSTER_LOST,
                                       detail=f"{request.num_nodes - len(nodes)} instance(s) gone")
                status = self.ended.get(key, plan.end)
                if status is not None:
                    return WatchResult(outcome=WatchOutcome.JOB_ENDED, job_status=status)
                activity.heartbeat({"hours": hours})
                await asyncio.sleep(0.02)

        return kept + [plan_candidates, run_instances, wait_running, start_ray, run_setup,
                       submit_job, watch_job]


class Harness:
    def __init__(self, env: WorkflowEnvironment, cloud: JobCloud, task_queue: str) -> None:
        self.env, self.cloud, self.task_queue = env, cloud, task_queue

    @property
    def client(self) -> Client:
        return self.env.client

    @property
    def jobs(self) -> ManagedJobs:
        return ManagedJobs(OrchClient(self.client, task_queue=self.task_queue))

    async def start(self, *tasks: Task, **options: object) -> tuple[int, WorkflowHandle]:
        job_id = next(JOB_IDS)
        handle = await self.client.start_workflow(
            ManagedJobWorkflow.run,
            ManagedJobInput.model_validate({"job_id": job_id, "name": f"job{job_id}",
                                            "tasks": list(tasks or [TASK]),
                                            "publish_search_attributes": False,
                                            "revision": JOB_REVISION, **options}),
            id=managed_job_workflow_id(job_id), task_queue=self.task_queue,
        )
        return job_id, handle

    async def state(self, handle: WorkflowHandle) -> ManagedJobState:
        state: ManagedJobState = await handle.query(STATE_QUERY, result_type=ManagedJobState)
        return state

    async def until(self, handle: WorkflowHandle, what: str,
                    predicate: Callable[[ManagedJobState], bool],
                    timeout: float = 15) -> ManagedJobState:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            state = await self.state(handle)
            if predicate(state):
                return state
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {state.status} "
                                     f"{[e.message for e in state.events]}")
            await asyncio.sleep(0.05)

    async def preempt_until_running_again(self, handle: WorkflowHandle, cluster: str
                                          ) -> ManagedJobState:
        """Take the running cluster away; wait for the job's second attempt to run."""
        self.cloud.preempt(cluster)
        return await self.until(handle, "the second attempt",
                                lambda s: running(s) and s.runs[0].attempt == 2)

    async def result(self, handle: WorkflowHandle) -> ManagedJobState:
        state: ManagedJobState = await handle.result()
        return state

    async def permits(self) -> SemaphoreView:
        view: SemaphoreView = await self.client.get_workflow_handle(LAUNCH_SEMAPHORE_ID).query(
            PERMITS_QUERY, result_type=SemaphoreView)
        return view

    async def holds_nothing(self, job_id: int, kinds: tuple[str, ...] = ("launch", "job")
                            ) -> None:
        """The job holds no permit of ``kinds`` (launch permits are held by its children),
        nor waits for one."""
        for pool in (p for p in (await self.permits()).pools if p.kind in kinds):
            holders = [h.request.holder_id for h in pool.holders]
            waiting = [w.holder_id for w in pool.waiters]
            mine = managed_job_workflow_id(job_id)
            assert not [h for h in holders + waiting if h == mine or h.startswith(mine + "/")]


@asynccontextmanager
async def job_worker(env: WorkflowEnvironment, cloud: JobCloud,
                     semaphore: SemaphoreSettings) -> AsyncIterator[str]:
    task_queue = f"jobs-{uuid.uuid4().hex[:8]}"
    activities = cloud.activities() + client_activities(env.client, semaphore)
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS,
                      activities=activities,
                      max_heartbeat_throttle_interval=timedelta(milliseconds=50),
                      default_heartbeat_throttle_interval=timedelta(milliseconds=50)):
        yield task_queue
        for workflow_id in (LAUNCH_SEMAPHORE_ID, BULK_TEARDOWN_ID, "managed-jobs"):
            with suppress(RPCError):  # never started: nothing to stop
                handle = env.client.get_workflow_handle(workflow_id)
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test over")


@pytest_asyncio.fixture
async def harness(time_skipping_env: WorkflowEnvironment, request: pytest.FixtureRequest
                  ) -> AsyncIterator[Harness]:
    semaphore = getattr(request, "param", SemaphoreSettings())
    cloud = JobCloud(time_skipping_env)
    async with job_worker(time_skipping_env, cloud, semaphore) as task_queue:
        yield Harness(time_skipping_env, cloud, task_queue)


TASK = Task(name="train", run="python train.py", setup="pip install -r requirements.txt")
FAILOVER = Task(name="train", run="python train.py",
                resources=Resources(job_recovery="failover"))  # type: ignore[arg-type]


def kinds(state: ManagedJobState) -> list[EventKind]:
    """The controller's events, without the launch steps it relays."""
    return [e.kind for e in state.events if e.kind != EventKind.STEP]


def steps(state: ManagedJobState) -> list[str]:
    return [e.message for e in state.events if e.kind == EventKind.STEP]


def running(state: ManagedJobState) -> bool:
    return state.status == ManagedJobStatus.RUNNING


# -- a job that simply runs ------------------------------------------------------------
async def test_a_job_launches_runs_and_leaves_nothing_behind(harness: Harness) -> None:
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    described = await handle.describe()
    summary = (await described.memo())["summary"]
    assert (summary["status"], summary["schedule_state"], summary["cluster"]) == (
        "RUNNING", "ALIVE", cluster)

    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert final.schedule_state == ScheduleState.DONE
    assert harness.cloud.launches == [(cluster, EAST)]
    assert harness.cloud.jobs.keys() == {(cluster, 1)}
    assert harness.cloud.instances[cluster] == {}  # torn down
    assert kinds(final) == [EventKind.SUBMITTED, EventKind.SLOT, EventKind.LAUNCHING,
                            EventKind.LAUNCHED, EventKind.RUNNING, EventKind.TASK_ENDED,
                            EventKind.TEARDOWN, EventKind.ENDED]
    assert steps(final)[0] == "waiting for a launch permit"
    assert "waiting for nodes" in steps(final)
    assert final.runs[0].attempt == 1 and final.started_at and final.ended_at
    await harness.holds_nothing(job_id)
    assert await workflow_type(harness.client, f"{handle.id}/launch-0-1") is None  # in the job
    assert await workflow_type(harness.client,
                               f"{handle.id}/launch-0-1/failover") == FAILOVER_WORKFLOW
    await save_with_children(harness.client, handle, "managed_job_success")


async def workflow_type(client: Client, workflow_id: str) -> str | None:
    """The type of workflow ``workflow_id``, None if the server has none by that id."""
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).workflow_type
    except RPCError:
        return None


async def test_a_job_submitted_before_launches_ran_in_the_job_launches_through_a_child(
    harness: Harness,
) -> None:
    """A job of revision 0 (submitted before the launch steps ran in the job; running when
    the worker was upgraded) keeps launching through LaunchWorkflow children, as its
    history holds."""
    job_id, handle = await harness.start(revision=0)
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    assert await workflow_type(harness.client, f"{handle.id}/launch-0-1") == LAUNCH_WORKFLOW
    assert await workflow_type(harness.client,
                               f"{handle.id}/launch-0-1/failover") == FAILOVER_WORKFLOW

    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert "waiting for nodes" in steps(final)
    assert harness.cloud.instances[cluster] == {}
    await harness.holds_nothing(job_id)


async def test_a_jobs_cluster_carries_the_control_planes_hash_on_the_cloud(
    harness: Harness,
) -> None:
    """``job-<id>-0`` of two control planes on one account are two clusters: the cloud
    sees the name with the plane's hash (orch.names); records and the UI keep the name."""
    job_id, handle = await harness.start(plane_hash="abc123")
    cluster, on_cloud = f"job-{job_id}-0", f"job-{job_id}-0-abc123"
    await harness.until(handle, "RUNNING", running)
    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert (final.runs[0].cluster_name, final.runs[0].name_on_cloud) == (cluster, on_cloud)
    assert harness.cloud.launches == [(on_cloud, EAST)]
    assert harness.cloud.jobs.keys() == {(cluster, 1)}  # the job knows its cluster's name
    assert harness.cloud.instances[on_cloud] == {}  # torn down by the name on cloud
    assert cluster not in harness.cloud.instances  # nothing ever looked up by the other


# -- preemption and recovery -----------------------------------------------------------
async def test_preemption_with_failover_relaunches_in_the_same_region(harness: Harness) -> None:
    harness.cloud.full_regions.add(EAST)  # the job first lands in the dearer region
    job_id, handle = await harness.start(FAILOVER)
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    harness.cloud.full_regions.clear()  # the cheaper region has room again

    state = await harness.preempt_until_running_again(handle, cluster)
    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert harness.cloud.launches == [(cluster, WEST), (cluster, WEST)]
    assert state.runs[0].placement == Placement(cloud="aws", region=WEST,
                                                instance_type="m5.large")
    assert final.status == ManagedJobStatus.SUCCEEDED and final.recoveries == 1
    assert EventKind.PREEMPTED in kinds(final)
    launching = [e.message for e in final.events if e.kind == EventKind.LAUNCHING]
    assert launching[1] == f"launching {cluster} in aws/{WEST} only"
    assert harness.cloud.instances[cluster] == {}
    await save_with_children(harness.client, handle, "managed_job_failover")


async def test_preemption_with_eager_next_region_relaunches_elsewhere(harness: Harness) -> None:
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)

    await harness.preempt_until_running_again(handle, cluster)
    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert harness.cloud.launches == [(cluster, EAST), (cluster, WEST)]
    assert final.status == ManagedJobStatus.SUCCEEDED and final.recoveries == 1
    preempted = next(e.message for e in final.events if e.kind == EventKind.PREEMPTED)
    assert "instance(s) gone" in preempted and "EAGER_NEXT_REGION" in preempted
    # cost-report's record: each cluster's time up, where it ran (the clock is stopped).
    usage = final.runs[0].usage
    assert [u.placement.region for u in usage.done] == [EAST, WEST]
    assert all(u.seconds >= 0 and u.num_nodes > 0 for u in usage.done)
    assert usage.up_since is None


async def test_eager_next_region_falls_back_to_the_lost_region_when_nothing_else_has_room(
    harness: Harness,
) -> None:
    harness.cloud.base.candidates = harness.cloud.base.candidates[:1]  # only us-east-1
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)

    await harness.preempt_until_running_again(handle, cluster)

    assert harness.cloud.launches == [(cluster, EAST), (cluster, EAST)]
    harness.cloud.finish(cluster)
    assert (await harness.result(handle)).status == ManagedJobStatus.SUCCEEDED


# -- failures of the user's code -------------------------------------------------------
async def test_max_restarts_on_errors_restarts_once_on_the_same_cluster_then_fails(
    harness: Harness,
) -> None:
    task = TASK.model_copy(update={"resources": Resources(
        job_recovery={"max_restarts_on_errors": 1})})  # type: ignore[arg-type]
    job_id, handle = await harness.start(task)
    cluster = f"job-{job_id}-0"
    harness.cloud.plans[cluster] = [JobPlan(end=JobStatus.FAILED), JobPlan(end=JobStatus.FAILED)]

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.FAILED
    assert sorted(harness.cloud.jobs) == [(cluster, 1), (cluster, 2)]
    assert harness.cloud.launches == [(cluster, EAST)]  # provisioned once
    assert harness.cloud.calls("run_setup") == 2  # a restart sets up again
    run = final.runs[0]
    assert (run.restarts, run.recoveries, run.attempt) == (1, 0, 2)
    assert kinds(final).count(EventKind.RESTARTING) == 1
    assert harness.cloud.instances[cluster] == {}
    await harness.holds_nothing(job_id)


async def test_a_failed_setup_is_restarted_and_the_job_then_succeeds(harness: Harness) -> None:
    task = TASK.model_copy(update={"resources": Resources(
        job_recovery={"max_restarts_on_errors": 2})})  # type: ignore[arg-type]
    job_id, handle = await harness.start(task)
    cluster = f"job-{job_id}-0"
    harness.cloud.setup_failures[cluster] = 1
    harness.cloud.plans[cluster] = [JobPlan(end=JobStatus.SUCCEEDED)]

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert list(harness.cloud.jobs) == [(cluster, 2)]  # job 1 was the failed setup
    assert final.runs[0].restarts == 1
    restarting = next(e.message for e in final.events if e.kind == EventKind.RESTARTING)
    assert restarting.startswith("the job ended FAILED_SETUP")


async def test_a_setup_failure_without_restarts_is_failed_setup(harness: Harness) -> None:
    job_id, handle = await harness.start()
    harness.cloud.setup_failures[f"job-{job_id}-0"] = 1

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.FAILED_SETUP
    assert harness.cloud.calls("submit_job") == 0
    assert harness.cloud.instances[f"job-{job_id}-0"] == {}


async def test_a_pipeline_whose_second_task_fails_stops_there(harness: Harness) -> None:
    tasks = [Task(name=f"step{i}", run=f"echo {i}") for i in range(3)]
    job_id, handle = await harness.start(*tasks)
    first, second, third = (f"job-{job_id}-{i}" for i in range(3))
    harness.cloud.plans[first] = [JobPlan(end=JobStatus.SUCCEEDED)]
    harness.cloud.plans[second] = [JobPlan(end=JobStatus.FAILED)]

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.FAILED
    assert [r.status for r in final.runs] == [
        ManagedJobStatus.SUCCEEDED, ManagedJobStatus.FAILED, ManagedJobStatus.CANCELLED]
    assert [c for c, _ in harness.cloud.launches] == [first, second]
    assert third not in harness.cloud.instances or harness.cloud.instances[third] == {}
    assert harness.cloud.instances[first] == {} and harness.cloud.instances[second] == {}
    assert final.current_task == 1 and "ended FAILED" in (final.failure or "")
    await harness.holds_nothing(job_id)
    await save_with_children(harness.client, handle, "managed_job_pipeline_failure")


# -- launch failures -------------------------------------------------------------------
@pytest.mark.parametrize("harness", [SemaphoreSettings(limits=PermitLimits(launch=1))],
                         indirect=True)
async def test_no_capacity_backs_off_holding_no_permit_while_another_job_launches(
    harness: Harness,
) -> None:
    starved_id, starved = await harness.start()
    harness.cloud.starved.add(f"job-{starved_id}-0")
    backing_off = await harness.until(
        starved, "ALIVE_BACKOFF", lambda s: s.schedule_state == ScheduleState.ALIVE_BACKOFF)
    assert backing_off.status == ManagedJobStatus.PENDING

    other_id, other = await harness.start()  # the only launch permit must be free
    await harness.until(other, "the other job RUNNING", running)
    assert (await harness.state(starved)).schedule_state == ScheduleState.ALIVE_BACKOFF
    await harness.holds_nothing(starved_id, kinds=("launch",))
    harness.cloud.finish(f"job-{other_id}-0")
    await harness.result(other)

    harness.cloud.starved.clear()
    harness.cloud.plans[f"job-{starved_id}-0"] = [JobPlan(end=JobStatus.SUCCEEDED)]
    final = await harness.result(starved)

    assert final.status == ManagedJobStatus.SUCCEEDED
    backoff = next(e for e in final.events if e.kind == EventKind.BACKOFF)
    relaunch = [e for e in final.events if e.kind == EventKind.LAUNCHING][1]
    waited = (relaunch.at - backoff.at).total_seconds()
    assert BACKOFF_INITIAL_S * 0.6 - 1 <= waited <= BACKOFF_INITIAL_S * 1.4 + 1
    failed = next(e.message for e in final.events if e.kind == EventKind.LAUNCH_FAILED)
    assert "InsufficientInstanceCapacity" in failed and EAST in failed and WEST in failed
    hops = [s for s in steps(final) if "InsufficientInstanceCapacity" in s]
    assert any(EAST in hop for hop in hops) and any(WEST in hop for hop in hops)


async def test_a_head_that_refuses_the_job_is_a_failed_round_with_backoff(
    harness: Harness,
) -> None:
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    harness.cloud.refused.add(cluster)  # the launch takes several calls before the submit
    await harness.until(handle, "ALIVE_BACKOFF",
                        lambda s: s.schedule_state == ScheduleState.ALIVE_BACKOFF)
    assert len(harness.cloud.launches) == 1  # no relaunch before the backoff
    assert not harness.cloud.instances[cluster]  # the refusing cluster was torn down

    harness.cloud.refused.clear()
    harness.cloud.plans[cluster] = [JobPlan(end=JobStatus.SUCCEEDED)]
    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert len(harness.cloud.launches) == 2
    failed = next(e.message for e in final.events if e.kind == EventKind.LAUNCH_FAILED)
    assert "could not be submitted" in failed
    assert EventKind.PREEMPTED not in kinds(final) and final.runs[0].recoveries == 0


async def test_a_failed_teardown_is_tried_again_until_the_cluster_is_gone(
    harness: Harness,
) -> None:
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    outage = ApplicationError("RequestLimitExceeded (scripted)", type="TransientError",
                              non_retryable=True)
    harness.cloud.base.fail("terminate_instances", outage, times=2)
    harness.cloud.finish(cluster)

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED
    assert not harness.cloud.instances[cluster]
    assert harness.cloud.calls("terminate_instances") == 3
    teardowns = [e.message for e in final.events if e.kind == EventKind.TEARDOWN]
    assert [m for m in teardowns if "trying again" in m] == teardowns[:2]
    assert "1 instance(s) terminated" in teardowns[2]


async def test_a_job_whose_workflow_was_terminated_reads_as_failed_controller(
    dev_server: WorkflowEnvironment,  # the terminated job's watch returns after it closed
) -> None:
    cloud = JobCloud(dev_server)
    async with job_worker(dev_server, cloud, SemaphoreSettings()) as task_queue:
        harness = Harness(dev_server, cloud, task_queue)
        job_id, handle = await harness.start()
        await harness.until(handle, "RUNNING", running)
        await handle.terminate("an operator removed it")

        state = await harness.jobs.state(job_id)  # what `orch jobs logs` follows

    assert state.status == ManagedJobStatus.FAILED_CONTROLLER
    assert state.ended_at is not None


async def test_launch_rounds_run_out_as_failed_no_resource(harness: Harness) -> None:
    job_id, handle = await harness.start(max_launch_rounds=2)
    harness.cloud.starved.add(f"job-{job_id}-0")

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.FAILED_NO_RESOURCE
    assert kinds(final).count(EventKind.LAUNCHING) == 2
    assert kinds(final).count(EventKind.BACKOFF) == 1
    await harness.holds_nothing(job_id)


async def test_a_task_nothing_can_run_fails_its_prechecks_at_once(harness: Harness) -> None:
    harness.cloud.base.candidates = []
    job_id, handle = await harness.start()

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.FAILED_PRECHECKS
    assert EventKind.BACKOFF not in kinds(final)
    assert "NoCandidatesError" in (final.failure or "")


# -- cancel, in every state ------------------------------------------------------------
async def _cancel_processed(handle: WorkflowHandle) -> bool:
    """Whether a workflow task completed after the job received its cancel signal."""
    events = (await handle.fetch_history()).events
    signalled = [i for i, e in enumerate(events)
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                 and e.workflow_execution_signaled_event_attributes.signal_name == "cancel"]
    return bool(signalled) and any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        for e in events[signalled[0]:])


async def _cancel_and_check(harness: Harness, job_id: int, handle: WorkflowHandle,
                            then: Callable[[], Awaitable[None]] | None = None
                            ) -> ManagedJobState:
    """Cancel as `orch jobs cancel` does, await ``then``, and check nothing is left."""
    outcome = await harness.jobs.cancel(job_id)
    assert outcome.requested
    if then is not None:
        await then()
    final = await harness.result(handle)
    assert final.status == ManagedJobStatus.CANCELLED
    assert final.schedule_state == ScheduleState.DONE
    assert EventKind.CANCELLING in kinds(final)
    assert all(r.status == ManagedJobStatus.CANCELLED for r in final.runs)
    await _left_nothing(harness, job_id)
    return final


async def _left_nothing(harness: Harness, job_id: int, timeout: float = 15) -> None:
    """No instance of the job's clusters is left and the job holds no permit: at once when
    the job tore its cluster down itself, once the bulk teardown is done with it when it
    handed the cluster (and its job slot) over."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            assert all(not nodes for name, nodes in harness.cloud.instances.items()
                       if name.startswith(f"job-{job_id}-"))
            await harness.holds_nothing(job_id)
            return
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("harness", [SemaphoreSettings(limits=PermitLimits(job=1))],
                         indirect=True)
async def test_cancel_while_waiting_for_a_job_slot(harness: Harness) -> None:
    first_id, first = await harness.start()
    await harness.until(first, "RUNNING", running)
    waiting_id, waiting = await harness.start()
    await harness.until(waiting, "WAITING", lambda s: s.schedule_state == ScheduleState.WAITING)
    assert [len(p.waiters) for p in (await harness.permits()).pools if p.kind == "job"] == [1]

    final = await _cancel_and_check(harness, waiting_id, waiting)

    assert final.started_at is None and harness.cloud.launches == [(f"job-{first_id}-0", EAST)]
    await _cancel_and_check(harness, first_id, first)


@pytest.mark.parametrize("harness", [SemaphoreSettings(limits=PermitLimits(launch=1))],
                         indirect=True)
async def test_a_job_queued_behind_another_launch_is_waiting_not_launching(
    harness: Harness,
) -> None:
    provisioning = harness.cloud.hold("wait_running")  # the first job holds the permit
    first_id, first = await harness.start()
    await harness.until(first, "provisioning",
                        lambda s: harness.cloud.calls("wait_running") > 0)
    second_id, second = await harness.start()

    queued = await harness.until(second, "queued for a launch permit", lambda s: any(
        e.message == "waiting for a launch permit" for e in s.events))
    assert (queued.status, queued.schedule_state) == (ManagedJobStatus.PENDING,
                                                      ScheduleState.WAITING)
    launching = await harness.state(first)
    assert (launching.status, launching.schedule_state) == (ManagedJobStatus.STARTING,
                                                            ScheduleState.LAUNCHING)
    provisioning.set()
    await harness.until(second, "RUNNING", running)
    for job_id, handle in ((first_id, first), (second_id, second)):
        harness.cloud.finish(f"job-{job_id}-0")
        assert (await harness.result(handle)).status == ManagedJobStatus.SUCCEEDED


@pytest.mark.parametrize("harness", [SemaphoreSettings(limits=PermitLimits(launch=1))],
                         indirect=True)
async def test_cancel_while_launching_tears_down_and_gives_the_permit_back(
    harness: Harness,
) -> None:
    provisioning = harness.cloud.hold("wait_running")  # instances exist, permit held
    job_id, handle = await harness.start()
    await harness.until(handle, "LAUNCHING", lambda s: s.schedule_state == ScheduleState.LAUNCHING)
    while harness.cloud.calls("wait_running") == 0:
        await asyncio.sleep(0.02)
    assert harness.cloud.instances[f"job-{job_id}-0"]

    # The cancel reaches FailoverWorkflow, which removes the half-made nodes and stops:
    # no other candidate is tried.
    final = await _cancel_and_check(harness, job_id, handle)
    provisioning.set()

    assert harness.cloud.calls("wait_running") == 1
    assert EventKind.RUNNING not in kinds(final) and harness.cloud.calls("submit_job") == 0


async def test_cancel_while_running(harness: Harness) -> None:
    job_id, handle = await harness.start()
    await harness.until(handle, "RUNNING", running)

    final = await _cancel_and_check(harness, job_id, handle)

    # The job handed its cluster and its job slot to the bulk teardown, which terminated
    # the cluster in one call for many and gave the slot back; no TeardownWorkflow ran.
    assert harness.cloud.calls("teardown_clusters") == 1
    assert harness.cloud.calls("terminate_instances") == 0
    assert any("handed to the bulk teardown" in e.message for e in final.events)
    await save_with_children(harness.client, handle, "managed_job_cancel")


async def _start_three_and_end_one(harness: Harness) -> tuple[list[tuple[int, WorkflowHandle]],
                                                                 list[str]]:
    """Three running jobs, one of which then ends: the two still running, and the ids
    ``orch jobs cancel -a`` would hand the bulk teardown (with one that never was)."""
    started = [await harness.start() for _ in range(3)]
    for _, handle in started:
        await harness.until(handle, "RUNNING", running)
    ended_id, ended = started.pop()
    harness.cloud.finish(f"job-{ended_id}-0")
    assert (await harness.result(ended)).status == ManagedJobStatus.SUCCEEDED
    ids = [managed_job_workflow_id(job_id) for job_id in (*(j for j, _ in started), ended_id)]
    await signal_bulk_teardown(harness.client, harness.task_queue, CANCEL_JOBS_SIGNAL,
                               CancelJobs(job_ids=[*ids, "job/404"]))
    return started, [*ids, "job/404"]


async def _cancelled_in_bulk(harness: Harness, started: list[tuple[int, WorkflowHandle]]
                             ) -> list[int]:
    """Each job ended CANCELLED in the workflow task of its (first) cancel, with no signal
    to wait on, leaving its cluster to the bulk teardown, which terminated it and gave the
    slot back. Returns how many cancel signals each job received."""
    signals = []
    for job_id, handle in started:
        await harness.until(handle, "CANCELLED", lambda s: s.status == ManagedJobStatus.CANCELLED)
        final = await harness.result(handle)
        assert [c.cluster_name for c in final.left_clusters] == [f"job-{job_id}-0"]
        history = (await handle.fetch_history()).events
        events = [e.event_type for e in history]
        cancels = [i for i, e in enumerate(history)
                   if e.workflow_execution_signaled_event_attributes.signal_name == "cancel"]
        assert events[cancels[0]:].count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1
        # CANCELLING, the cluster left, CANCELLED: the memo written when the task yields to
        # the teardown and at its end (three times before revision 1), no patch marker
        assert events[cancels[0]:].count(EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED) <= 2
        assert EventType.EVENT_TYPE_MARKER_RECORDED not in events
        assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED not in events
        await _left_nothing(harness, job_id)
        signals.append(len(cancels))
    # Only the job that ended tore its cluster down itself; the others went in bulk.
    assert harness.cloud.calls("terminate_instances") == 1
    assert harness.cloud.calls("teardown_clusters") >= 1
    return signals


async def test_jobs_cancelled_for_the_bulk_teardown_leave_it_their_clusters_in_one_task(
    harness: Harness,
) -> None:
    # What orch jobs cancel -a does: the ids to the entity, then a cancel to each job on
    # its behalf; a job that ended and one that never was: no error, nothing sent.
    started, ids = await _start_three_and_end_one(harness)
    sent = [await cancel_for_bulk_teardown(harness.client, job) for job in ids]
    assert sent == [True, True, False, False]

    # The entity read the clusters from the results; it signalled no job itself (its
    # grace period is two minutes).
    assert await _cancelled_in_bulk(harness, started) == [1, 1]
    await save_with_children(harness.client, started[0][1], "managed_job_bulk_cancel")


async def test_jobs_no_one_signalled_are_cancelled_by_the_bulk_teardown_after_its_grace(
    harness: Harness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CLI handed the ids over and died before its signals (or is older than them).
    monkeypatch.setattr(bulk_teardown_activities, "SIGNAL_GRACE_S", 0.5)
    started, _ = await _start_three_and_end_one(harness)

    assert await _cancelled_in_bulk(harness, started) == [1, 1]


async def test_cancel_while_recovering_lets_the_teardown_finish_and_relaunches_nothing(
    harness: Harness,
) -> None:
    job_id, handle = await harness.start()
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    tearing_down = harness.cloud.hold("terminate_instances")
    harness.cloud.preempt(cluster)
    await harness.until(handle, "RECOVERING", lambda s: s.status == ManagedJobStatus.RECOVERING)
    while harness.cloud.calls("terminate_instances") == 0:
        await asyncio.sleep(0.02)

    async def finish_the_teardown() -> None:  # once the job has taken the cancel in
        while not await _cancel_processed(handle):
            await asyncio.sleep(0.02)
        tearing_down.set()

    final = await _cancel_and_check(harness, job_id, handle, then=finish_the_teardown)

    assert harness.cloud.launches == [(cluster, EAST)]
    assert kinds(final).index(EventKind.PREEMPTED) < kinds(final).index(EventKind.CANCELLING)


async def test_cancel_while_backing_off(harness: Harness) -> None:
    job_id, handle = await harness.start()
    harness.cloud.starved.add(f"job-{job_id}-0")
    await harness.until(handle, "ALIVE_BACKOFF",
                        lambda s: s.schedule_state == ScheduleState.ALIVE_BACKOFF)

    final = await _cancel_and_check(harness, job_id, handle)

    assert kinds(final).count(EventKind.LAUNCHING) == 1


# -- a long life ------------------------------------------------------------------------
async def _run_histories(client: Client, handle: WorkflowHandle) -> list[int]:
    """The number of events of each run of the job, following continue-as-new."""
    lengths = []
    run_id = handle.first_execution_run_id or handle.run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        lengths.append(len(history.events))
        last = history.events[-1]
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  if last.event_type
                  == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW else "")
    return lengths


# The semaphore's sweep for dead holders would wake every simulated minute for 3 days.
@pytest.mark.parametrize("harness", [SemaphoreSettings(reclaim_interval=timedelta(hours=12))],
                         indirect=True)
async def test_a_job_running_for_three_days_stays_under_the_history_limits(
    harness: Harness,
) -> None:
    """30 h running, preempted, 90 min without capacity anywhere (backing off), 42 h more."""
    job_id, handle = await harness.start(max_events_per_run=150)
    cluster = f"job-{job_id}-0"
    harness.cloud.plans[cluster] = [
        JobPlan(after_hours=30, preempted=True, starve_for=timedelta(minutes=90)),
        JobPlan(after_hours=42, end=JobStatus.SUCCEEDED),
    ]
    began = await harness.env.get_current_time()

    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED and final.recoveries == 1
    assert (await harness.env.get_current_time()) - began >= timedelta(days=3)
    backoffs = kinds(final).count(EventKind.BACKOFF)
    lengths = await _run_histories(harness.client, handle)
    assert len(lengths) > 1, "the backoff rounds should have made it continue as new"
    assert max(lengths) < 4096
    assert final.events_dropped + len(final.events) > backoffs > 10
    await harness.holds_nothing(job_id)


# -- job ids --------------------------------------------------------------------------------
async def test_job_ids_are_unique_and_consecutive_across_continue_as_new(
    harness: Harness,
) -> None:
    first = await harness.client.start_workflow(
        ManagedJobIdsWorkflow.run, JobIdsInput(allocations_per_run=10), id="managed-jobs",
        task_queue=harness.task_queue)
    ids: list[int] = []
    for wave in (5, 5, 5, 25):  # concurrent launches; 25 is more than 10 Updates in flight
        ids += await asyncio.gather(*(harness.jobs.allocate_id() for _ in range(wave)))

    assert sorted(ids) == list(range(1, 41))
    assert len(await _run_histories(harness.client, first)) > 2  # next id carried over
    latest = harness.client.get_workflow_handle("managed-jobs")
    await save_with_children(harness.client, latest, "managed_job_ids")


# -- the rules, without a server ------------------------------------------------------------
def test_backoff_starts_at_a_minute_grows_and_is_capped_at_five() -> None:
    assert backoff_seconds(0, 0.5) == 60
    assert backoff_seconds(1, 0.5) == 96
    assert 36 <= backoff_seconds(0, 0.0) < backoff_seconds(0, 0.999) <= 84
    assert all(backoff_seconds(n, j) <= 300 for n in range(20) for j in (0.0, 0.5, 0.999))
    assert backoff_seconds(10, 0.5) == 300


def test_recovery_plans_follow_the_strategy_and_respect_a_pinned_region() -> None:
    lost = Placement(cloud="aws", region=EAST, zone="us-east-1a")
    eager = recovery_plan(TASK, lost)
    assert [p.where for p in eager.phases] == [f"anywhere but aws/{EAST}", "anywhere"]
    assert eager.phases[0].blocklist.blocks("aws", EAST) and not eager.phases[1].blocklist.entries
    pinned = recovery_plan(Task(run="x", resources=Resources(region=EAST)), lost)
    assert [p.where for p in pinned.phases] == ["anywhere"]
    failover = recovery_plan(FAILOVER, lost)
    assert failover.phases[0].pin == Placement(cloud="aws", region=EAST)
    assert [p.max_rounds for p in failover.phases] == [3, None]


def test_launch_failures_are_classified_by_their_cause() -> None:
    capacity = {"attempts": [{"error_type": "CapacityError"}, {"error_type": "AuthError"}]}
    auth_only = {"attempts": [{"error_type": "AuthError"}]}
    assert classify_launch_failure("NoResourcesError", "", capacity) == LaunchFailure.NO_RESOURCE
    assert classify_launch_failure("NoResourcesError", "", auth_only) == LaunchFailure.PRECHECK
    assert classify_launch_failure("NoCandidatesError", "plan_candidates", {}) == \
        LaunchFailure.PRECHECK
    assert classify_launch_failure("SetupError", "run_setup", {}) == LaunchFailure.SETUP
    assert classify_launch_failure("SetupError", "start_ray", {}) == LaunchFailure.CLUSTER


# -- the watch activity itself, on a real local-cloud node (no Ray: the job table is
# -- written the way the driver writes it) --------------------------------------------
class HeadJob:
    """Job 1 in the job table of a local node, as orch.runtime.jobs keeps it."""

    def __init__(self, head: NodeInfo) -> None:
        assert head.home is not None
        self.dir = Path(head.home) / ".orch-node" / "jobs" / "1"
        self.dir.mkdir(parents=True)
        self.submitted = datetime.now(UTC)

    def set(self, status: JobStatus, output: str = "") -> None:
        with open(self.dir / "run.log", "a") as log:
            log.write(output)
        record = JobRecord(id=1, status=status, submitted_at=self.submitted)
        (self.dir / "job.json").write_text(record.model_dump_json())


@pytest.fixture
def local_cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalProvider]:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    provider = LocalProvider()
    yield provider
    for cluster in ("watched",):
        provider.terminate_instances(REGION, cluster)  # frees the nodes' loopback addresses


def watch_request(provider: LocalProvider, nodes: int = 1, **options: float | str
                  ) -> WatchRequest:
    provider.run_instances(ProvisionConfig(cluster_name="watched", num_nodes=nodes,
                                           region=REGION))
    info = provider.get_cluster_info(REGION, "watched")
    assert info.head is not None
    return WatchRequest.model_validate({
        "job_id": 7, "task_index": 0, "attempt": 1, "cluster_name": "watched",
        "name_on_cloud": "watched", "cloud": "local", "region": REGION, "head": info.head,
        "num_nodes": nodes, "cluster_job_id": 1, "poll_interval_s": 0.2,
        "failure_grace_s": 0.1, **options})


def saved_output(request: WatchRequest) -> bytes:
    return attempt_log_path(orch_home(), request.job_id, request.task_index,
                            request.attempt).read_bytes()


async def test_the_watch_copies_the_output_as_it_comes_and_returns_when_the_job_ends(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud)
    job = HeadJob(request.head)
    job.set(JobStatus.RUNNING, "line 1\n")
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.extend(details)
    watching = asyncio.ensure_future(env.run(watch_job, request))
    while not attempt_log_path(orch_home(), 7, 0, 1).exists():
        assert not watching.done()
        await asyncio.sleep(0.05)
    assert saved_output(request) == b"line 1\n"

    job.set(JobStatus.SUCCEEDED, "line 2\n")
    result = await asyncio.wait_for(watching, 30)

    assert result == WatchResult(outcome=WatchOutcome.JOB_ENDED, job_status=JobStatus.SUCCEEDED)
    assert saved_output(request) == b"line 1\nline 2\n"
    assert beats and WatchProgress.model_validate(beats[-1]).log_offset == 14


async def test_a_cluster_jobs_watch_keeps_its_output_under_the_clusters_name_on_the_cloud(
    local_cloud: LocalProvider,
) -> None:
    """The copier of ``orch logs`` (workflows/job_output.py): the same watch, the output
    where the CLI reads it (orch.client.cluster_output)."""
    key = "watched/job-1-20261204T120000000000"
    request = watch_request(local_cloud, cluster_output_key=key)
    HeadJob(request.head).set(JobStatus.SUCCEEDED, "line 1\nline 2\n")

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result.job_status == JobStatus.SUCCEEDED
    assert (orch_home() / "cluster_output" / f"{key}.log").read_bytes() == b"line 1\nline 2\n"
    lines: list[str] = []
    OutputReader(cluster_job_output(key), lines.append).read_new()
    assert lines == ["line 1", "line 2"]
    assert not attempt_log_path(orch_home(), 7, 0, 1).exists()


async def test_a_retried_watch_resumes_from_its_heartbeat_details(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud)
    HeadJob(request.head).set(JobStatus.FAILED, "line 1\nline 2\n")
    saved = attempt_log_path(orch_home(), 7, 0, 1)
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"line 1\nli")  # the last attempt wrote past what it reported
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=[{"log_offset": 7}])

    result = await asyncio.wait_for(env.run(watch_job, request), 30)

    assert result.outcome == WatchOutcome.JOB_ENDED and result.job_status == JobStatus.FAILED
    assert saved.read_bytes() == b"line 1\nline 2\n"


async def test_a_watch_resumed_on_another_machine_copies_the_output_from_the_start(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud)
    HeadJob(request.head).set(JobStatus.SUCCEEDED, "line 1\nline 2\n")
    env = ActivityEnvironment()  # the last attempt, elsewhere, had copied 7 bytes
    env.info = dataclasses.replace(env.info, heartbeat_details=[{"log_offset": 7}])

    result = await asyncio.wait_for(env.run(watch_job, request), 30)

    assert result.job_status == JobStatus.SUCCEEDED
    assert saved_output(request) == b"line 1\nline 2\n"


async def test_a_node_that_disappears_under_a_running_job_is_a_lost_cluster(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud, nodes=2, instance_check_s=0.3)
    HeadJob(request.head).set(JobStatus.RUNNING)
    worker = local_cloud.get_cluster_info(REGION, "watched").nodes[1]
    assert worker.home is not None
    shutil.rmtree(worker.home)  # reclaimed by the cloud

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result.outcome == WatchOutcome.CLUSTER_LOST
    assert "1 of 2 instance(s) gone" in result.detail


async def test_a_failed_job_on_a_shrunken_cluster_is_a_lost_cluster_not_a_user_error(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud, nodes=2)
    HeadJob(request.head).set(JobStatus.FAILED, "lost the command on rank 1\n")
    worker = local_cloud.get_cluster_info(REGION, "watched").nodes[1]
    assert worker.home is not None
    shutil.rmtree(worker.home)

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result.outcome == WatchOutcome.CLUSTER_LOST
    assert result.detail.startswith("the job ended FAILED and 1 of 2")


@pytest.mark.parametrize("ended", [JobStatus.FAILED_DRIVER, JobStatus.CANCELLED])
async def test_a_job_ended_by_its_nodes_shutdown_is_a_lost_cluster_once_the_node_is_gone(
    local_cloud: LocalProvider, ended: JobStatus, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A preempted machine signals the job's driver before its instance leaves RUNNING:
    the cloud shows the node for a second after the job's end is readable, and then not
    (within the grace); so does a CANCELLED written by a driver of an older orch."""
    request = watch_request(local_cloud, failure_grace_s=2.0)
    HeadJob(request.head).set(ended, "step 41\n")
    gone_at = time.monotonic() + 1.0
    listed = LocalProvider.query_instances

    def query_instances(provider: LocalProvider, region: str, cluster: str
                        ) -> dict[str, InstanceStatus]:
        return {} if time.monotonic() > gone_at else listed(provider, region, cluster)

    monkeypatch.setattr(LocalProvider, "query_instances", query_instances)

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result.outcome == WatchOutcome.CLUSTER_LOST
    assert result.detail.startswith(f"the job ended {ended} and 1 of 1")


async def test_a_cancel_on_a_whole_cluster_ends_the_job(local_cloud: LocalProvider) -> None:
    request = watch_request(local_cloud)
    HeadJob(request.head).set(JobStatus.CANCELLED)

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result == WatchResult(outcome=WatchOutcome.JOB_ENDED, job_status=JobStatus.CANCELLED)


async def test_a_head_that_stops_answering_while_its_instances_run_is_a_lost_cluster(
    local_cloud: LocalProvider,
) -> None:
    request = watch_request(local_cloud, unreachable_limit_s=0.5)
    job = HeadJob(request.head)
    job.set(JobStatus.RUNNING)
    (job.dir / "job.json").write_text("{not json")  # the head answers nothing readable

    result = await asyncio.wait_for(ActivityEnvironment().run(watch_job, request), 30)

    assert result.outcome == WatchOutcome.CLUSTER_LOST
    assert "has not answered" in result.detail


async def test_a_job_workflow_terminated_mid_launch_leaves_no_nodes(
    dev_server: WorkflowEnvironment,  # the time-skipping server applies no parent-close policy
) -> None:
    """No cleanup runs in a terminated job: the failover child's REQUEST_CANCEL
    parent-close policy cancels it, and it removes the nodes of the attempt in flight."""
    cloud = JobCloud(dev_server)
    provisioning = cloud.hold("wait_running")  # the nodes exist and never come up
    async with job_worker(dev_server, cloud, SemaphoreSettings()) as task_queue:
        harness = Harness(dev_server, cloud, task_queue)
        job_id, handle = await harness.start()
        while cloud.calls("wait_running") == 0:
            await asyncio.sleep(0.02)
        assert cloud.instances[f"job-{job_id}-0"]

        await handle.terminate("an operator removed it")
        failover = dev_server.client.get_workflow_handle(f"{handle.id}/launch-0-1/failover")
        while not any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
                      for e in (await failover.fetch_history()).events):
            await asyncio.sleep(0.05)
        provisioning.set()  # the call in flight returns; the failover cleans up after it
        while (await failover.describe()).status == WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(0.05)

        assert (await failover.describe()).status == WorkflowExecutionStatus.CANCELED
        assert not cloud.instances[f"job-{job_id}-0"]
