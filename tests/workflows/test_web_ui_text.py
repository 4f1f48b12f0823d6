"""What the Web UI shows of a cluster's workflows, read back from a real dev server the way
the UI reads it: static summaries and details from DescribeWorkflowExecution, current
details from the ``__temporal_workflow_metadata`` query, activity summaries from the
user metadata of each ActivityTaskScheduled event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from orch.records import DownRequest, LaunchRequest
from orch.semaphore import LAUNCH_SEMAPHORE_ID, PermitLimits, SemaphoreSettings
from orch.spec import Resources, Task
from tests.workflows.fake_cloud import ClusterTestbed, FakeCloud, fake_cloud_worker
from workflows.cluster import ClusterWorkflow
from workflows.launch_semaphore import LAUNCH_WAITING_ATTRIBUTE

TASK = Task(name="train", num_nodes=2, run="python train.py",
            resources=Resources(cloud="local", cpus="2+"))


@pytest_asyncio.fixture
async def bed(dev_server: WorkflowEnvironment) -> AsyncIterator[tuple[FakeCloud, ClusterTestbed]]:
    cloud = FakeCloud()
    async with fake_cloud_worker(dev_server, cloud) as testbed:
        yield cloud, testbed


async def current_details(handle: WorkflowHandle) -> str:
    metadata: WorkflowMetadata = await handle.query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def eventually(handle: WorkflowHandle, needle: str, timeout: float = 20) -> str:
    """The workflow's current details once they contain ``needle``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        details = await current_details(handle)
        if needle in details:
            return details
        assert asyncio.get_running_loop().time() < deadline, f"{needle!r} never in {details!r}"
        await asyncio.sleep(0.2)


async def find_failover(env: WorkflowEnvironment, cluster_id: str) -> WorkflowHandle:
    """The FailoverWorkflow of the cluster's launch (child ids carry a run id)."""
    while True:
        async for execution in env.client.list_workflows(
                f"WorkflowId STARTS_WITH '{cluster_id}/launch' "
                "AND WorkflowType = 'FailoverWorkflow'"):
            return env.client.get_workflow_handle(execution.id)
        await asyncio.sleep(0.2)


async def activity_summaries(env: WorkflowEnvironment, workflow_id: str) -> dict[str, str]:
    """Activity type → the summary its ActivityTaskScheduled event carries."""
    converter = env.client.data_converter.payload_converter
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    found = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            summary = event.user_metadata.summary
            found[name] = converter.from_payload(summary, str) if summary.data else ""
    return found


async def test_a_launch_tells_its_story_in_words(
    dev_server: WorkflowEnvironment, bed: tuple[FakeCloud, ClusterTestbed]
) -> None:
    cloud, testbed = bed
    gate = cloud.hold("run_instances")
    cluster = await testbed.start_cluster("train")
    launch = asyncio.ensure_future(cluster.execute_update(
        ClusterWorkflow.launch, LaunchRequest(task=TASK, requested_by="alice@laptop")))

    failover = await find_failover(dev_server, cluster.id)
    failover_id = failover.id
    launch_id = failover_id.removesuffix("/failover")
    assert "provisioning on local" in await eventually(failover, "provisioning on")
    assert "**Status:** INIT" in await current_details(cluster)

    described = await dev_server.client.get_workflow_handle(launch_id).describe()
    assert await described.static_summary() == "launch train: 2× cpus=2+ on local"
    details = await described.static_details() or ""
    assert "**Launched by:** alice@laptop" in details and "disk 256 GB" in details
    failover_described = await failover.describe()
    assert await failover_described.static_summary() == "failover train: find 2× cpus=2+ on local"

    # A second launch waits its turn (orch down would cut the first short instead).
    again = asyncio.ensure_future(cluster.execute_update(
        ClusterWorkflow.launch, LaunchRequest(task=TASK, requested_by="alice@laptop")))
    assert "**Waiting for the lock:** launch" in await eventually(cluster,
                                                                  "Waiting for the lock")
    gate.set()
    await launch
    await again
    await cluster.execute_update(ClusterWorkflow.down, DownRequest())
    assert "**Status:** TERMINATED" in await current_details(cluster)

    steps = await activity_summaries(dev_server, failover_id)
    assert steps["run_instances"] == "start sandboxes ×2 in local"
    assert steps["check_quota"] == "check capacity ×2 in local"
    assert steps["wait_running"] == "list sandboxes of train in local until running"
    assert steps["request_permit"] == "ask the launch semaphore for a launch permit"
    runtime = await activity_summaries(dev_server, launch_id)
    assert runtime["start_ray"] == "ray start on 2 nodes (head 10.0.0.1)"
    assert runtime["setup_runtime"].startswith("install the runtime")
    on_cluster = await activity_summaries(dev_server, cluster.id)
    assert on_cluster["submit_job"] == "submit job 2 (train) to the head 10.0.0.1"
    async for execution in dev_server.client.list_workflows(
            f"WorkflowId STARTS_WITH '{cluster.id}/down'"):
        teardown = await dev_server.client.get_workflow_handle(execution.id).describe()
        assert await teardown.static_summary() == "teardown train: 2 instances in local"
        assert "Done:" in await current_details(
            dev_server.client.get_workflow_handle(execution.id))


async def test_a_launch_queued_for_a_permit_says_how_many_are_ahead(
    dev_server: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud()
    gate = cloud.hold("run_instances")
    one_permit = SemaphoreSettings(limits=PermitLimits(launch=1), publish_search_attributes=True)
    async with fake_cloud_worker(dev_server, cloud, semaphore=one_permit) as testbed:
        semaphore = dev_server.client.get_workflow_handle(LAUNCH_SEMAPHORE_ID)
        launches, failovers = [], []
        for waiting, name in enumerate(("first", "second", "third")):
            if waiting:  # the count the next request reads, once the semaphore published it
                await published_waiting(semaphore, waiting - 1)
            cluster = await testbed.start_cluster(name)
            launches.append(asyncio.ensure_future(cluster.execute_update(
                ClusterWorkflow.launch, LaunchRequest(task=TASK))))
            failovers.append(await find_failover(dev_server, cluster.id))
            await eventually(failovers[-1], "launch permit")
        assert "provisioning on" in await eventually(failovers[0], "provisioning on")
        assert "waiting for a launch permit: about 0 ahead" in await eventually(
            failovers[1], "ahead")
        assert "waiting for a launch permit: about 1 ahead" in await eventually(
            failovers[2], "ahead")
        details = await eventually(semaphore, "Launch permits")
        assert "**Launch permits:** 1 of 1 held, 2 waiting; next: " in details
        gate.set()
        await asyncio.gather(*launches)


async def published_waiting(semaphore: WorkflowHandle, count: int, timeout: float = 20) -> None:
    """Until the semaphore publishes ``count`` waiting launches (it may not exist yet: the
    first launch's request activity starts it)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            attributes = (await semaphore.describe()).typed_search_attributes
            if attributes.get(LAUNCH_WAITING_ATTRIBUTE) == count:
                return
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        assert asyncio.get_running_loop().time() < deadline, f"never {count} waiting"
        await asyncio.sleep(0.2)
