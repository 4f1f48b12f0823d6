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

import signal
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.activities.conftest import (
    EAST_1,
    SHORT_HEARTBEAT,
    Moto,
    activity_runs,
    runs_of,
    stop_launch_semaphore,
    wait_for_call,
    worker_process,
)
from tests.activities.test_failover_on_aws import pinned
from tests.fakes.ec2_fault_front import EC2FaultFront
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow

SLOWER_THAN_IT = 7.0  # seconds a slow call takes: well over SHORT_HEARTBEAT


async def start(env: WorkflowEnvironment, task_queue: str, cluster_name: str,
                num_nodes: int = 1) -> WorkflowHandle[Any, FailoverOutput]:
    return await env.client.start_workflow(
        FailoverWorkflow.run, FailoverInput(cluster_name=cluster_name,
                                            task=pinned(EAST_1, num_nodes=num_nodes)),
        id=f"failover/{uuid.uuid4().hex[:12]}", task_queue=task_queue)


async def heartbeat_timeouts(handle: WorkflowHandle[Any, Any]) -> set[float]:
    return {event.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
            .total_seconds() async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}


async def test_describes_slower_than_the_heartbeat_timeout_do_not_fail_the_wait(
    dev_server: WorkflowEnvironment, real_time_queue: str, short_heartbeats: None,  # noqa: F811
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str,
) -> None:
    aws_env.hold_state("pending", polls=2)
    aws_env.slow("DescribeInstances", SLOWER_THAN_IT, times=3)

    handle = await start(dev_server, real_time_queue, cluster_name)
    output = await handle.result()

    assert SHORT_HEARTBEAT.total_seconds() in await heartbeat_timeouts(handle)
    runs = await activity_runs(handle)
    assert [r.attempt for r in runs_of(runs, "wait_running")] == [1]
    assert output.history == [] and not aws_env.calls("TerminateInstances")
    assert [i["State"]["Name"] for i in moto.instances(EAST_1, cluster_name)] == ["running"]


async def test_a_run_instances_slower_than_the_heartbeat_timeout_runs_once(
    dev_server: WorkflowEnvironment, real_time_queue: str, short_heartbeats: None,  # noqa: F811
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str,
) -> None:
    aws_env.slow("RunInstances", SLOWER_THAN_IT, times=1)

    handle = await start(dev_server, real_time_queue, cluster_name, num_nodes=2)
    output = await handle.result()

    runs = await activity_runs(handle)
    assert SHORT_HEARTBEAT.total_seconds() in await heartbeat_timeouts(handle)
    assert [r.attempt for r in runs_of(runs, "run_instances")] == [1]
    assert output.history == []
    assert len(moto.instances(EAST_1, cluster_name, ("running",))) == 2


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

    last = runs_of(await activity_runs(handle), "run_instances")[-1]
    assert last.attempt == 2, (tmp_path / "worker-1.log").read_text()[-3000:]
    assert last.last_failure.timeout_failure_info.timeout_type == (
        TimeoutType.TIMEOUT_TYPE_HEARTBEAT)
    assert output.history == []
    # The first call landed after its worker died; the retry replayed its ClientToken.
    assert len(moto.instances(EAST_1, cluster_name, ("pending", "running"))) == 2
