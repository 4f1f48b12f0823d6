"""A slow AWS: calls that take longer than the heartbeat timeout, and a worker that dies
inside one (issue 12, part 1).

moto answers in milliseconds; the fault front makes chosen calls take seconds, as a
throttled EC2 endpoint does. These tests run FailoverWorkflow with its real activities on
a dev server of their own (real time: a heartbeat timeout here is a real one) and check
two things the waiter and the side-thread heartbeats promise:

* a call or a describe slower than the heartbeat timeout is not a failure: the activity
  keeps heartbeating while it blocks, so it runs once and the zone is not blocked;
* a worker SIGKILLed inside RunInstances is noticed by its heartbeat timeout (not the
  10-minute start-to-close), the call runs again on another worker, and the cluster ends
  with as many instances as nodes (EC2's ClientToken makes the retry a replay).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orch.clouds.aws import AWSProvider
from orch.semaphore import SemaphoreSettings
from tests.activities.conftest import EAST_1, Moto, stop_launch_semaphore
from tests.activities.test_failover_on_aws import pinned
from tests.fakes.ec2_fault_front import EC2FaultFront
from tests.workflows.conftest import dev_server  # noqa: F401 (the fixture)
from workers.registry import PLAIN_ACTIVITIES, WORKFLOWS, client_activities
from workflows import options
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow

SHORT_HEARTBEAT = timedelta(seconds=3)
SLOWER_THAN_IT = 7.0  # seconds a slow call takes: well over SHORT_HEARTBEAT


@pytest.fixture
def boto3_models_parsed(aws_env: EC2FaultFront) -> None:
    """Pay botocore's model parsing (seconds of C code holding the GIL, under load) before
    a test's clock starts, so that it is not mistaken for a silent worker."""
    provider = AWSProvider()
    for service in ("ec2", "sts", "service-quotas"):
        provider._client(service, EAST_1)


@pytest.fixture
def short_heartbeats(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for calls in (options.PROVIDER_CALL, options.LONG_CALL):
        monkeypatch.setitem(calls, "heartbeat_timeout", SHORT_HEARTBEAT)
    yield


@pytest_asyncio.fixture
async def slow_queue(
    dev_server: WorkflowEnvironment,  # noqa: F811 (the imported fixture)
    aws_env: EC2FaultFront, orch_home: Path, boto3_models_parsed: None,
) -> AsyncIterator[str]:
    """A worker with every workflow and real activity, heartbeating to the server at least
    every 0.5 s (the SDK's default throttle, 0.8 x the timeout, leaves no margin)."""
    queue = f"slow-{uuid.uuid4().hex[:8]}"
    client = dev_server.client
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(client, task_queue=queue, workflows=WORKFLOWS,
                          activities=PLAIN_ACTIVITIES + client_activities(
                              client, SemaphoreSettings()),
                          activity_executor=executor,
                          max_heartbeat_throttle_interval=timedelta(seconds=0.5),
                          default_heartbeat_throttle_interval=timedelta(seconds=0.5)):
            yield queue
    await stop_launch_semaphore(client)


async def start(env: WorkflowEnvironment, task_queue: str, cluster_name: str,
                num_nodes: int = 1) -> WorkflowHandle[Any, FailoverOutput]:
    return await env.client.start_workflow(
        FailoverWorkflow.run, FailoverInput(cluster_name=cluster_name,
                                            task=pinned(EAST_1, num_nodes=num_nodes)),
        id=f"failover/{uuid.uuid4().hex[:12]}", task_queue=task_queue)


async def activity_runs(handle: WorkflowHandle[Any, Any]) -> dict[str, list[Any]]:
    """Activity name -> the started-event attributes of each of its runs."""
    names: dict[int, str] = {}
    runs: dict[str, list[Any]] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            runs.setdefault(names[started.scheduled_event_id], []).append(started)
    return runs


async def heartbeat_timeouts(handle: WorkflowHandle[Any, Any]) -> set[float]:
    return {event.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
            .total_seconds() async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}


async def test_describes_slower_than_the_heartbeat_timeout_do_not_fail_the_wait(
    dev_server: WorkflowEnvironment, slow_queue: str, short_heartbeats: None,  # noqa: F811
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str,
) -> None:
    aws_env.hold_state("pending", polls=2)
    aws_env.slow("DescribeInstances", SLOWER_THAN_IT, times=3)

    handle = await start(dev_server, slow_queue, cluster_name)
    output = await handle.result()

    assert SHORT_HEARTBEAT.total_seconds() in await heartbeat_timeouts(handle)
    runs = await activity_runs(handle)
    assert [r.attempt for r in runs["wait_running"]] == [1]
    assert output.history == [] and not aws_env.calls("TerminateInstances")
    assert [i["State"]["Name"] for i in moto.instances(EAST_1, cluster_name)] == ["running"]


async def test_a_run_instances_slower_than_the_heartbeat_timeout_runs_once(
    dev_server: WorkflowEnvironment, slow_queue: str, short_heartbeats: None,  # noqa: F811
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str,
) -> None:
    aws_env.slow("RunInstances", SLOWER_THAN_IT, times=1)

    handle = await start(dev_server, slow_queue, cluster_name, num_nodes=2)
    output = await handle.result()

    runs = await activity_runs(handle)
    assert SHORT_HEARTBEAT.total_seconds() in await heartbeat_timeouts(handle)
    assert [r.attempt for r in runs["run_instances"]] == [1]
    assert output.history == []
    assert len(moto.instances(EAST_1, cluster_name, ("running",))) == 2


def worker_process(env: WorkflowEnvironment, queue: str, log: Path) -> subprocess.Popen[bytes]:
    """``python -m workers`` on the test's queue, as an operator runs it."""
    address = env.client.service_client.config.target_host
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "workers", "--address", address, "--task-queue", queue],
            stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())


async def test_a_worker_killed_inside_run_instances_is_noticed_by_its_heartbeat(
    dev_server: WorkflowEnvironment, aws_env: EC2FaultFront,  # noqa: F811
    moto: Moto, cluster_name: str, orch_home: Path, tmp_path: Path,
) -> None:
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    aws_env.slow("RunInstances", 30.0, times=1)  # the first node's call outlives its worker
    first = worker_process(dev_server, queue, tmp_path / "worker-1.log")
    try:
        handle = await start(dev_server, queue, cluster_name, num_nodes=2)
        await wait_for_call(aws_env, "RunInstances")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        second = worker_process(dev_server, queue, tmp_path / "worker-2.log")
        try:
            output = await handle.result()
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        await stop_launch_semaphore(dev_server.client)

    last = (await activity_runs(handle))["run_instances"][-1]
    assert last.attempt == 2, (tmp_path / "worker-1.log").read_text()[-3000:]
    assert last.last_failure.timeout_failure_info.timeout_type == (
        TimeoutType.TIMEOUT_TYPE_HEARTBEAT)
    assert output.history == []
    # The first call landed after its worker died; the retry replayed its ClientToken.
    assert len(moto.instances(EAST_1, cluster_name, ("pending", "running"))) == 2


async def wait_for_call(front: EC2FaultFront, action: str) -> None:
    """Until ``front`` has taken the slow answer of ``action`` (the call is in flight)."""
    for _ in range(600):
        if front.delayed(action):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {action} reached the front in 60 s")
