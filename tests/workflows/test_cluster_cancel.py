"""Cancelling a ClusterWorkflow (the Web UI's "Cancel", ``temporal workflow cancel``) tears
the cluster down instead of orphaning it: mid-launch and once it is UP. Time-skipping
server, scripted FakeCloud; afterwards the fake cloud holds no instance of the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment

from orch.client import update_failure
from orch.failover_rules import Candidate
from orch.records import (
    CANCELLED,
    CANCELLED_MESSAGE,
    CancelRequest,
    ClusterRecord,
    DownRequest,
    LaunchRequest,
    LaunchResult,
)
from orch.spec import Task
from orch.status import ClusterStatus
from tests.workflows.fake_cloud import FakeCloud, fake_cloud_worker, provision_error
from tests.workflows.histories import save_with_children
from workflows import failover as failover_module
from workflows.cluster import ClusterWorkflow

TASK = Task(num_nodes=2, run="echo run")


async def until(check, what: str, tries: int = 400) -> None:  # type: ignore[no-untyped-def]
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def cancelled_record(handle: WorkflowHandle) -> ClusterRecord:
    """The cancelled workflow's end: it completes, as after orch down, with its record."""
    record = ClusterRecord.model_validate(await handle.result())
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    return record


async def launching(env: WorkflowEnvironment, handle: WorkflowHandle, cloud: FakeCloud
                    ) -> tuple[asyncio.Future[LaunchResult], WorkflowHandle]:
    """Start a launch and wait until its RunInstances is in flight (held by the test):
    the launch update, and the handle of the FailoverWorkflow making the nodes."""
    launch = asyncio.ensure_future(
        handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=TASK)))
    await until(lambda: asyncio.sleep(0, "run_instances" in cloud.calls), "RunInstances")
    first_run = (await handle.describe()).run_id
    return launch, env.client.get_workflow_handle(
        f"{handle.id}/launch-{first_run[:8]}-1/failover")


async def asked_to_stop(failover: WorkflowHandle) -> None:
    """Until the failover asked its call in flight to stop (it then cleans up after it)."""
    async def cancel_requested() -> bool:
        return any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
                   for e in (await failover.fetch_history()).events)

    await until(cancel_requested, "the cancel reaching the failover's call")


@dataclass
class MidLaunch:
    """A cluster whose launch has a RunInstances in flight, held by the test."""

    cloud: FakeCloud
    handle: WorkflowHandle
    launch: asyncio.Future[LaunchResult]
    failover: WorkflowHandle
    creating: asyncio.Event

    async def once_asked_to_stop(self) -> None:
        """Once the failover asked its call to stop, let the call complete: its nodes now
        exist, for the failover to remove."""
        await asked_to_stop(self.failover)
        self.creating.set()


@asynccontextmanager
async def mid_launch(env: WorkflowEnvironment, name: str) -> AsyncIterator[MidLaunch]:
    cloud = FakeCloud()
    creating = cloud.hold("run_instances")
    async with fake_cloud_worker(env, cloud) as bed:
        handle = await bed.start_cluster(name)
        launch, failover = await launching(env, handle, cloud)
        yield MidLaunch(cloud, handle, launch, failover, creating)


async def test_cancel_mid_launch_removes_the_nodes_being_made(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    async with mid_launch(time_skipping_env, "doomed") as at:
        cloud, handle, launch = at.cloud, at.handle, at.launch

        await handle.cancel()
        await at.once_asked_to_stop()
        record = await cancelled_record(handle)
        await save_with_children(time_skipping_env.client, handle, "cluster_cancel_launching")
        with pytest.raises(WorkflowUpdateFailedError):
            await launch

    assert record.status == ClusterStatus.TERMINATED
    assert cloud.instances["doomed"] == {}  # the failover removed what the call made
    assert cloud.calls.count("run_instances") == 1  # and tried nothing else
    assert "setup_runtime" not in cloud.calls
    assert "workflow cancelled: tearing the cluster down" in record.events


async def test_cancel_an_up_cluster_tears_it_down(time_skipping_env: WorkflowEnvironment
                                                  ) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("up")
        await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=TASK))
        assert len(cloud.instances["up"]) == 2

        await handle.cancel()
        record = await cancelled_record(handle)
        await save_with_children(time_skipping_env.client, handle, "cluster_cancel_up")

    assert record.status == ClusterStatus.TERMINATED
    assert cloud.instances["up"] == {}
    assert cloud.calls[-3:] == ["terminate_instances", "wait_instances_gone", "cleanup_ports"]


async def test_a_cancelled_cluster_takes_no_new_operation(time_skipping_env: WorkflowEnvironment
                                                          ) -> None:
    cloud = FakeCloud()
    gone = cloud.hold("wait_instances_gone")  # the cancel's teardown is under way
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("busy")
        await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=TASK))
        await handle.cancel()
        await until(lambda: asyncio.sleep(0, "wait_instances_gone" in cloud.calls), "teardown")
        again = asyncio.ensure_future(
            handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=TASK)))
        await asyncio.sleep(0.3)
        gone.set()
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await again
        record = await cancelled_record(handle)

    assert "torn down" in str(refused.value.cause)
    assert record.status == ClusterStatus.TERMINATED and cloud.instances["busy"] == {}
    assert cloud.calls.count("run_instances") == 1


async def test_terminating_the_cluster_workflow_mid_launch_still_removes_the_nodes(
    dev_server: WorkflowEnvironment,  # the time-skipping server applies no parent-close policy
) -> None:
    """No cleanup runs in a terminated workflow: the parent-close policies (REQUEST_CANCEL
    on the launch, and on its failover) make the failover remove what it made."""
    async with mid_launch(dev_server, "cut") as at:
        cloud, handle, launch, failover = at.cloud, at.handle, at.launch, at.failover

        await handle.terminate("operator")
        await at.once_asked_to_stop()
        with pytest.raises(WorkflowFailureError) as failure:
            await failover.result()
        with pytest.raises(Exception):  # noqa: B017 (the update never completes)
            await launch
        launch_workflow = dev_server.client.get_workflow_handle(failover.id.rsplit("/", 1)[0])
        await until(lambda: _closed(launch_workflow), "the launch's end")
        launch_status = (await launch_workflow.describe()).status

    assert isinstance(failure.value.cause, CancelledError)
    assert launch_status == WorkflowExecutionStatus.CANCELED  # asked to stop, not killed
    assert cloud.instances["cut"] == {}


async def _closed(handle: WorkflowHandle) -> bool:
    return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING


async def test_a_teardown_that_fails_after_the_cancel_leaves_the_cluster_for_orch_down(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("stuck")
        await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=TASK))
        cloud.fail("terminate_instances", provision_error("AuthError", "ExpiredToken", "cloud"))

        await handle.cancel()

        async def gave_up() -> bool:
            record: ClusterRecord = await handle.query(ClusterWorkflow.record)
            return any("after the workflow was cancelled" in e for e in record.events)

        await until(gave_up, "the failed teardown")
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        assert len(cloud.instances["stuck"]) == 2  # still there, and still known
        await handle.execute_update(ClusterWorkflow.down, DownRequest())  # the retry
        record = await cancelled_record(handle)

    assert record.status == ClusterStatus.TERMINATED and cloud.instances["stuck"] == {}


async def test_cancel_reaches_a_failover_that_continued_as_new(
    dev_server: WorkflowEnvironment,  # the time-skipping server delivers the SDK's own cancel
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--retry-until-up: the failover has continued as new when the cluster is cancelled.
    The launch's cancel must reach the failover's current run, not the first one."""
    monkeypatch.setattr(failover_module, "ROUNDS_PER_RUN", 1)
    monkeypatch.setattr(failover_module, "RETRY_ROUND_S", (1,))
    cloud = FakeCloud([Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"])])
    cloud.no_capacity = {"us-east-1a"}
    async with fake_cloud_worker(dev_server, cloud) as bed:
        handle = await bed.start_cluster("waits")
        launch = asyncio.ensure_future(handle.execute_update(
            ClusterWorkflow.launch, LaunchRequest(task=TASK, retry_until_up=True)))
        await until(lambda: asyncio.sleep(0, "run_instances" in cloud.calls), "RunInstances")
        first_run = (await handle.describe()).run_id
        failover = dev_server.client.get_workflow_handle(
            f"{handle.id}/launch-{first_run[:8]}-1/failover")
        started = (await failover.describe()).run_id

        async def continued() -> bool:
            return (await failover.describe()).run_id != started

        await until(continued, "the failover's continue-as-new")
        await handle.cancel()
        record = await asyncio.wait_for(cancelled_record(handle), 30)
        with pytest.raises(WorkflowUpdateFailedError):
            await launch
        failover_status = (await failover.describe()).status
        await save_with_children(dev_server.client, handle, "cluster_cancel_continued_failover")

    assert record.status == ClusterStatus.TERMINATED
    assert failover_status == WorkflowExecutionStatus.CANCELED
    assert cloud.instances["waits"] == {}


async def test_down_mid_launch_cancels_the_launch_instead_of_waiting_for_it(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    async with mid_launch(time_skipping_env, "changed-mind") as at:
        cloud, handle, launch = at.cloud, at.handle, at.launch

        down = asyncio.ensure_future(handle.execute_update(ClusterWorkflow.down, DownRequest()))
        await at.once_asked_to_stop()
        await down
        with pytest.raises(WorkflowUpdateFailedError) as launch_failed:
            await launch
        record = ClusterRecord.model_validate(await handle.result())
        await save_with_children(time_skipping_env.client, handle, "cluster_down_launching")

    assert record.status == ClusterStatus.TERMINATED
    assert cloud.instances["changed-mind"] == {}
    assert cloud.calls.count("run_instances") == 1 and "setup_runtime" not in cloud.calls
    assert "launch cancelled by orch down" in record.events
    told = update_failure(launch_failed.value)  # what `orch launch` prints
    assert (told.kind, str(told)) == (CANCELLED, CANCELLED_MESSAGE)


async def test_down_ends_a_launch_stuck_in_retry_until_up(
    dev_server: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(failover_module, "ROUNDS_PER_RUN", 1)
    monkeypatch.setattr(failover_module, "RETRY_ROUND_S", (1,))
    cloud = FakeCloud([Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"])])
    cloud.no_capacity = {"us-east-1a"}  # never any capacity: the launch would wait forever
    async with fake_cloud_worker(dev_server, cloud) as bed:
        handle = await bed.start_cluster("nowhere")
        launch = asyncio.ensure_future(handle.execute_update(
            ClusterWorkflow.launch, LaunchRequest(task=TASK, retry_until_up=True)))
        await until(lambda: asyncio.sleep(0, cloud.calls.count("run_instances") >= 2),
                    "a second round of RunInstances")
        result = await asyncio.wait_for(
            handle.execute_update(ClusterWorkflow.down, DownRequest()), 60)
        with pytest.raises(WorkflowUpdateFailedError):
            await launch
        record = ClusterRecord.model_validate(await asyncio.wait_for(handle.result(), 30))

    assert result.instances == []  # the failover removed what each attempt made
    assert record.status == ClusterStatus.TERMINATED
    assert cloud.instances["nowhere"] == {}


async def test_cancel_operation_cuts_the_launch_short_and_keeps_the_cluster(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    """Ctrl-C in orch launch, answered "cancel": the nodes being made go, the entity stays."""
    async with mid_launch(time_skipping_env, "second-thoughts") as at:
        cloud, handle, launch = at.cloud, at.handle, at.launch

        cancel = asyncio.ensure_future(
            handle.execute_update(ClusterWorkflow.cancel_operation, CancelRequest()))
        await at.once_asked_to_stop()
        cut = await cancel
        left = dict(cloud.instances["second-thoughts"])  # by the time cancel returned
        with pytest.raises(WorkflowUpdateFailedError):
            await launch
        record = ClusterRecord.model_validate(await handle.query("record"))
        nothing = await handle.execute_update(ClusterWorkflow.cancel_operation, CancelRequest())
        await handle.execute_update(ClusterWorkflow.down, DownRequest())

    assert (cut, nothing) == ("launch", "")
    assert record.status == ClusterStatus.INIT and "launch cancelled by its user" in record.events
    assert left == {}
