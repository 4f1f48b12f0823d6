"""orch's workflows with their REAL activities, against moto's EC2 behind the fault front.

A worker on a fresh task queue hosts every workflow, the plain activities of
``workers.registry`` (they run in a thread pool, as on a real worker) and the semaphore's
client activities. Its process environment points boto3 at the fault front (the
``aws_env`` fixture of the AWS provider tests) and ``ORCH_HOME`` at a temporary directory,
so orch's SSH key pair, known hosts and local-cloud sandboxes stay in the test's folder.
Assertions read moto's state straight from moto, past the front.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import ActivityTaskStartedEventAttributes
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orch import waiting
from orch.clouds.aws import AWSProvider
from orch.clouds.base import TAG_CLUSTER
from orch.records import (
    PROGRESS_SIGNAL,
    ClusterInput,
    ClusterRecord,
    DownRequest,
    LaunchProgress,
    LaunchRequest,
    TeardownResult,
)
from orch.semaphore import LAUNCH_SEMAPHORE_ID, REQUEST_PERMIT_ACTIVITY, SemaphoreSettings
from orch.spec import Task
from tests.clouds.aws.conftest import aws_env, front, moto_url  # noqa: F401 (fixtures)
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.workflows.conftest import dev_server  # noqa: F401 (the fixture)
from workers.registry import PLAIN_ACTIVITIES, WORKFLOWS, client_activities
from workflows import options
from workflows.cluster import ClusterWorkflow
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow

# Regions and zones that both orch's catalog (m6id.large) and moto know.
EAST_1, EAST_2 = "us-east-1", "us-east-2"
INSTANCE_TYPE = "m6id.large"  # 2 vCPUs, 8 GiB: the standard family's vCPU quota
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass
class Moto:
    """EC2 straight from moto, past the fault front: the ground truth of every test."""

    url: str
    _clients: dict[str, Any] = field(default_factory=dict)

    def ec2(self, region: str) -> Any:
        if region not in self._clients:
            self._clients[region] = boto3.session.Session().client(
                "ec2", region_name=region, endpoint_url=self.url,
                aws_access_key_id="testing", aws_secret_access_key="testing")
        return self._clients[region]

    def instances(self, region: str, cluster_name: str,
                  states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
        """The cluster's instances (by its tag) in ``states``, in launch order."""
        reservations = self.ec2(region).describe_instances(Filters=[
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_name]},
            {"Name": "instance-state-name", "Values": list(states)},
        ])["Reservations"]
        return sorted((i for r in reservations for i in r["Instances"]),
                      key=lambda i: i["LaunchTime"])

    def states(self, region: str, cluster_name: str) -> dict[str, str]:
        """Instance id → state name, terminated ones included."""
        return {i["InstanceId"]: i["State"]["Name"]
                for i in self.instances(region, cluster_name, (*LIVE_STATES, "terminated"))}


@pytest.fixture(scope="session")
def moto(moto_url: str) -> Moto:  # noqa: F811 (the imported fixture)
    return Moto(moto_url)


@pytest.fixture
def orch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    return home


@pytest.fixture
def cluster_name() -> str:
    """moto lives as long as the session: every test has its own cluster."""
    return f"t-{uuid.uuid4().hex[:10]}"


async def stop_launch_semaphore(client: Client) -> None:
    """The semaphore lives on the test worker's task queue: end it with the worker."""
    semaphore = client.get_workflow_handle(LAUNCH_SEMAPHORE_ID)
    with contextlib.suppress(RPCError):  # never started: nothing to stop
        if (await semaphore.describe()).status == WorkflowExecutionStatus.RUNNING:
            await semaphore.terminate("test over")


@contextlib.asynccontextmanager
async def real_worker(env: WorkflowEnvironment, cloud: str, **options: Any
                      ) -> AsyncIterator[str]:
    """A worker with orch's workflows and real activities (``options``: more of the
    Worker's); yields its task queue."""
    queue = f"{cloud}-{uuid.uuid4().hex[:8]}"
    client = env.client
    activities = PLAIN_ACTIVITIES + client_activities(client, SemaphoreSettings())
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(client, task_queue=queue, workflows=WORKFLOWS,
                          activities=activities, activity_executor=executor, **options):
            yield queue
    await stop_launch_semaphore(client)


@pytest_asyncio.fixture
async def task_queue(
    time_skipping_env: WorkflowEnvironment,
    aws_env: EC2FaultFront,  # noqa: F811 (the imported fixture)
    orch_home: Path,
) -> AsyncIterator[str]:
    """A worker on moto's EC2 (through the fault front); yields its task queue."""
    async with real_worker(time_skipping_env, "aws") as queue:
        yield queue


async def activity_runs(handle: WorkflowHandle[Any, Any]
                        ) -> list[tuple[str, ActivityTaskStartedEventAttributes]]:
    """(activity name, its started event) of every activity the workflow ran, in the order
    they started; the semaphore's own activity is left out."""
    names: dict[int, str] = {}
    started = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            names[event.event_id] = scheduled.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            started.append((names[attributes.scheduled_event_id], attributes))
    return [(name, run) for name, run in started if name != REQUEST_PERMIT_ACTIVITY]


def runs_of(runs: list[tuple[str, Any]], activity_name: str) -> list[Any]:
    """The started events of ``activity_name`` among ``runs`` (:func:`activity_runs`)."""
    return [run for name, run in runs if name == activity_name]


async def activities_started(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, int]]:
    """(activity name, attempt) of every activity the workflow ran, in the order started."""
    return [(name, run.attempt) for name, run in await activity_runs(handle)]


SHORT_HEARTBEAT = timedelta(seconds=3)


@pytest.fixture
def boto3_models_parsed(aws_env: EC2FaultFront) -> None:  # noqa: F811 (the imported fixture)
    """Pay botocore's model parsing (seconds of C code holding the GIL, under load) before
    a test's clock starts, so that it is not mistaken for a silent worker."""
    provider = AWSProvider()
    for service in ("ec2", "sts", "service-quotas"):
        provider._client(service, EAST_1)


@pytest.fixture
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiter polls every 0.05 to 0.5 s instead of 1 to 15 s: for fakes whose
    operations and instances move a step per read, not with time (so the test's clock
    does not pay for a real cloud's pace it does not have)."""
    monkeypatch.setattr(waiting, "MIN_GAP_S", 0.05)
    monkeypatch.setattr(waiting, "MAX_GAP_S", 0.5)


@pytest.fixture
def short_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Provider calls and waits under a 3 s heartbeat timeout instead of 20 s."""
    for calls in (options.PROVIDER_CALL, options.LONG_CALL):
        monkeypatch.setitem(calls, "heartbeat_timeout", SHORT_HEARTBEAT)


@pytest_asyncio.fixture
async def real_time_queue(
    dev_server: WorkflowEnvironment,  # noqa: F811 (the imported fixture)
    aws_env: EC2FaultFront, orch_home: Path, boto3_models_parsed: None,  # noqa: F811
) -> AsyncIterator[str]:
    """Like ``task_queue``, on a dev server of the test's own (real time: a heartbeat
    timeout is a real one), heartbeating to the server at least every 0.5 s (the SDK's
    default throttle, 0.8 x the timeout, would leave no margin)."""
    async with real_worker(dev_server, "real",
                           max_heartbeat_throttle_interval=timedelta(seconds=0.5),
                           default_heartbeat_throttle_interval=timedelta(seconds=0.5)) as queue:
        yield queue


class Clusters:
    """ClusterWorkflows on the test's task queue, driven as the client drives them; any
    still running at the end is terminated (a workflow left with a timer and no worker
    would stall the time-skipping server)."""

    def __init__(self, env: WorkflowEnvironment, task_queue: str) -> None:
        self.env, self.task_queue = env, task_queue
        self.started: list[WorkflowHandle[Any, Any]] = []

    async def start(self, name: str) -> WorkflowHandle[Any, Any]:
        handle = await self.env.client.start_workflow(
            ClusterWorkflow.run, ClusterInput(name=name, publish_search_attributes=False),
            id=f"cluster/{name}-{uuid.uuid4().hex[:6]}", task_queue=self.task_queue)
        self.started.append(handle)
        return handle

    async def fail_over(self, cluster: WorkflowHandle[Any, Any], task: Task) -> FailoverOutput:
        """A launch's failover, reporting to the cluster's workflow; then what the launch
        tells the cluster next (where it is; not its nodes, whose sshd does not exist, so
        the teardown's ray stop has nothing to try)."""
        name = (await self.record(cluster)).name
        output: FailoverOutput = await self.env.client.execute_workflow(
            FailoverWorkflow.run, FailoverInput(cluster_name=name, task=task,
                                                report_to=cluster.id),
            id=f"{cluster.id}/failover", task_queue=self.task_queue)
        await cluster.signal(PROGRESS_SIGNAL, LaunchProgress(step="waiting for nodes",
                                                             placement=output.placement))
        return output

    async def launch_fails(self, cluster: WorkflowHandle[Any, Any], task: Task) -> None:
        with pytest.raises(WorkflowUpdateFailedError):
            await cluster.execute_update(ClusterWorkflow.launch, LaunchRequest(task=task))

    @staticmethod
    async def record(cluster: WorkflowHandle[Any, Any]) -> ClusterRecord:
        state: ClusterRecord = await cluster.query(ClusterWorkflow.record)
        return state

    @staticmethod
    async def down(cluster: WorkflowHandle[Any, Any]) -> TeardownResult:
        result: TeardownResult = await cluster.execute_update(ClusterWorkflow.down,
                                                              DownRequest())
        return result

    async def close(self) -> None:
        for handle in self.started:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("test over")


@pytest_asyncio.fixture
async def clusters(time_skipping_env: WorkflowEnvironment, task_queue: str
                   ) -> AsyncIterator[Clusters]:
    started = Clusters(time_skipping_env, task_queue)
    yield started
    await started.close()


def worker_process(env: WorkflowEnvironment, queue: str, log: Path,
                   heartbeat: timedelta | None = None) -> subprocess.Popen[bytes]:
    """``python -m workers`` on the test's queue, as an operator runs it, in a process of
    its own that a test can SIGKILL; ``heartbeat``: with provider calls and waits under
    that heartbeat timeout (``tests.activities.short_heartbeat_worker``)."""
    address = env.client.service_client.config.target_host
    command = ["-m", "workers"] if heartbeat is None else [
        "-m", "tests.activities.short_heartbeat_worker", str(heartbeat.total_seconds())]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, *command, "--address", address, "--task-queue", queue],
            stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())


async def wait_for_call(fault_front: EC2FaultFront, action: str) -> None:
    """Until ``fault_front`` has taken the slow answer of ``action`` (the call is in
    flight)."""
    for _ in range(600):
        if fault_front.delayed(action):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {action} reached the front in 60 s")
