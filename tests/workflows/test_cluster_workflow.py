"""ClusterWorkflow, LaunchWorkflow, FailoverWorkflow and TeardownWorkflow on the
time-skipping test server, with every activity replaced by the scripted FakeCloud."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orch.clouds.base import InstanceStatus
from orch.records import (
    JOBS_UPDATE,
    PROGRESS_SIGNAL,
    ClusterRecord,
    DownRequest,
    ExecRequest,
    JobsRequest,
    LaunchRequest,
    LaunchResult,
    Placement,
    StartRequest,
    StopRequest,
    TeardownInput,
    TeardownResult,
)
from orch.runtime.job_records import JobRecord
from orch.spec import Task
from orch.status import ClusterStatus, JobStatus
from tests.workflows.fake_cloud import ClusterTestbed, FakeCloud, fake_cloud_worker
from tests.workflows.histories import save_with_children
from workflows.cluster import ClusterWorkflow
from workflows.teardown import TeardownWorkflow

HELLO = Task(name="hello", num_nodes=2, setup="echo setup", run="echo run",
             workdir="/tmp")

PROVISION = ["plan_candidates", "check_quota", "run_instances", "wait_running",
             "get_cluster_info"]
RUNTIME = ["wait_for_nodes", "setup_runtime", "start_ray"]


class Harness:
    def __init__(self, env: WorkflowEnvironment, cloud: FakeCloud, testbed: ClusterTestbed):
        self.env, self.cloud, self.testbed = env, cloud, testbed
        self.task_queue = testbed.task_queue

    async def cluster(self, name: str = "hello") -> WorkflowHandle:
        return await self.testbed.start_cluster(name)

    async def launch(self, handle: WorkflowHandle, task: Task = HELLO) -> LaunchResult:
        result: LaunchResult = await handle.execute_update(
            ClusterWorkflow.launch, LaunchRequest(task=task)
        )
        return result

    async def record(self, handle: WorkflowHandle) -> ClusterRecord:
        record: ClusterRecord = await handle.query(ClusterWorkflow.record)
        return record


@pytest_asyncio.fixture
async def harness(time_skipping_env: WorkflowEnvironment) -> AsyncIterator[Harness]:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as testbed:
        yield Harness(time_skipping_env, cloud, testbed)


async def test_launch_runs_the_steps_in_order_and_submits_job_1(harness: Harness) -> None:
    handle = await harness.cluster()
    result = await harness.launch(handle)

    assert harness.cloud.calls == PROVISION + RUNTIME + ["sync_files", "run_setup", "submit_job"]
    assert result.job_id == 1 and result.provisioned
    assert result.record.status == ClusterStatus.UP
    assert result.record.placement == Placement(cloud="local", region="local")
    assert result.record.info is not None
    assert [n.internal_ip for n in result.record.info.nodes] == ["10.0.0.1", "10.0.0.2"]
    assert result.record.gcs_address == "10.0.0.1:6380"
    await save_with_children(harness.env.client, handle, "cluster_launch")


async def first_child(client: Client, parent: WorkflowHandle) -> WorkflowHandle:
    """The first child workflow ``parent`` started."""
    started = next(e for e in (await parent.fetch_history()).events
                   if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED)
    return client.get_workflow_handle(
        started.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id)


STEPS = {EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
         EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED}


def is_report(event: HistoryEvent) -> bool:
    attributes = event.signal_external_workflow_execution_initiated_event_attributes
    return (event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            and attributes.signal_name == PROGRESS_SIGNAL)


async def reports_alone(handle: WorkflowHandle) -> tuple[int, list[int]]:
    """How many progress reports the workflow sent, and which of them (0-based) went out
    without a step of their own: the workflow waited for those to arrive before going on."""
    batches: list[list[HistoryEvent]] = []  # the commands of each completed workflow task
    for event in (await handle.fetch_history()).events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            batches.append([])
        elif batches:
            batches[-1].append(event)
    reported = [batch for batch in batches if any(is_report(e) for e in batch)]
    return len(reported), [i for i, batch in enumerate(reported)
                           if not any(e.event_type in STEPS for e in batch)]


async def test_a_launch_reports_each_step_as_it_starts_it_and_every_report_arrives(
    harness: Harness,
) -> None:
    """A step's progress signal leaves with the step's own command, rather than a workflow
    task later (a round trip through the server per step, on the launch's critical path);
    a step that changes only the display ("setting up runtime", "runtime ready") rides
    with the next report instead of costing a signal; the cluster's record still has every
    step, in order, when the launch returns, and the Ray address before the setup runs."""
    handle = await harness.cluster()
    result = await harness.launch(handle)

    launch = await first_child(harness.env.client, handle)
    # waiting for nodes, starting Ray (+ setting up runtime), syncing files (+ runtime
    # ready), running setup: each with its step's command.
    assert await reports_alone(launch) == (4, [])
    assert result.record.events == [
        "waiting for a launch permit", "got a launch permit",
        "provisioning on local local", "waiting for nodes", "setting up runtime",
        "starting Ray", "runtime ready", "syncing files", "running setup"]


async def test_every_cloud_call_uses_the_name_on_cloud_and_the_record_keeps_the_name(
    harness: Harness,
) -> None:
    """Provisioning, refresh, stop, start and down all go by the record's name on cloud
    (orch.names); nothing is ever looked up by the user's name."""
    handle = await harness.testbed.start_cluster("hello", name_on_cloud="hello-abc123")
    result = await harness.launch(handle)
    assert (result.record.name, result.record.name_on_cloud) == ("hello", "hello-abc123")
    made = sorted(harness.cloud.instances["hello-abc123"])
    assert len(made) == 2

    refreshed: ClusterRecord = await handle.execute_update(ClusterWorkflow.refresh)
    assert refreshed.status == ClusterStatus.UP and refreshed.warnings == []
    await handle.execute_update(ClusterWorkflow.stop, StopRequest())
    assert set(harness.cloud.instances["hello-abc123"].values()) == {InstanceStatus.STOPPED}
    started: ClusterRecord = await handle.execute_update(ClusterWorkflow.start, StartRequest())
    assert started.status == ClusterStatus.UP
    down: TeardownResult = await handle.execute_update(ClusterWorkflow.down, DownRequest())

    assert sorted(down.instances) == made and down.message.startswith("Cluster hello:")
    assert harness.cloud.instances["hello-abc123"] == {}
    assert set(harness.cloud.instances) == {"hello-abc123"}


async def test_launch_on_an_up_cluster_reuses_it(harness: Harness) -> None:
    handle = await harness.cluster()
    await harness.launch(handle)
    harness.cloud.calls.clear()

    again = await harness.launch(handle)

    assert harness.cloud.calls == ["sync_files", "run_setup", "submit_job"]
    assert again.job_id == 2 and not again.provisioned
    assert harness.cloud.submitted == [1, 2]


async def test_a_task_that_does_not_fit_is_refused_before_anything_runs(harness: Harness) -> None:
    handle = await harness.cluster()
    await harness.launch(handle)
    harness.cloud.calls.clear()

    with pytest.raises(WorkflowUpdateFailedError) as failure:
        await harness.launch(handle, HELLO.model_copy(update={"num_nodes": 3}))

    assert "Task requested 3 nodes, but the existing cluster hello has 2" in str(
        failure.value.cause)
    assert harness.cloud.calls == []


async def test_setup_failure_leaves_the_cluster_up_and_reports_the_tail(harness: Harness) -> None:
    harness.cloud.fail("run_setup", ApplicationError(
        "setup failed on rank 1", {"tail": "(setup, rank=1) boom"}, type="SetupError",
        non_retryable=True))
    handle = await harness.cluster()

    with pytest.raises(WorkflowUpdateFailedError) as failure:
        await harness.launch(handle)

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "SetupError"
    record = await harness.record(handle)
    assert record.status == ClusterStatus.UP
    assert "submit_job" not in harness.cloud.calls
    assert record.next_job_id == 2  # job 1 is the one that failed its setup
    await save_with_children(harness.env.client, handle, "cluster_setup_failure")


async def test_a_failed_provision_leaves_init_and_a_relaunch_does_not_duplicate(
    harness: Harness,
) -> None:
    harness.cloud.fail("start_ray", ApplicationError("ray start failed", type="SetupError",
                                                    non_retryable=True))
    handle = await harness.cluster()
    with pytest.raises(WorkflowUpdateFailedError):
        await harness.launch(handle)
    record = await harness.record(handle)
    assert record.status == ClusterStatus.INIT
    assert record.placement is not None  # teardown knows where to look

    result = await harness.launch(handle)

    assert result.record.status == ClusterStatus.UP
    assert len(harness.cloud.instances[result.record.name]) == 2


async def _left_init_by_a_failed_ray_start(harness: Harness) -> WorkflowHandle:
    """A 2-node cluster whose nodes exist but whose runtime never came up (INIT)."""
    harness.cloud.fail("start_ray", ApplicationError("ray start failed", type="SetupError",
                                                    non_retryable=True))
    handle = await harness.cluster()
    with pytest.raises(WorkflowUpdateFailedError) as failure:
        await harness.launch(handle)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    hint = cause.details[0]["hint"]
    assert "is left INIT" in hint and "orch down hello" in hint
    assert "orch launch -c hello TASK (it keeps the cluster's nodes)" in hint
    assert (await harness.record(handle)).status == ClusterStatus.INIT
    return handle


async def test_a_relaunch_of_an_init_cluster_keeps_its_shape(harness: Harness) -> None:
    """`orch launch -c hello CMD` (one node, nothing sized) on a half-made 2-node cluster
    provisions the cluster's 2 nodes again, not 1 (which the cloud refuses, and which
    used to block the whole cloud); the job runs on the one node it asks for."""
    handle = await _left_init_by_a_failed_ray_start(harness)

    result = await harness.launch(handle, Task(run="echo again"))

    assert harness.cloud.nodes_asked == [2, 2]
    assert result.record.status == ClusterStatus.UP and result.provisioned
    assert result.record.info is not None and len(result.record.info.nodes) == 2
    assert result.record.launched is not None and result.record.launched.num_nodes == 2
    assert len(harness.cloud.instances[result.record.name]) == 2
    assert harness.cloud.specs[-1].num_nodes == 1


async def test_a_relaunch_asking_more_than_the_init_cluster_has_is_refused(
    harness: Harness,
) -> None:
    handle = await _left_init_by_a_failed_ray_start(harness)
    harness.cloud.calls.clear()

    with pytest.raises(WorkflowUpdateFailedError) as failure:
        await harness.launch(handle, HELLO.model_copy(update={"num_nodes": 3}))

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "TaskDoesNotFit"
    assert cause.message.startswith("Task requested 3 nodes, but the existing cluster hello")
    assert "orch down hello" in cause.message
    assert harness.cloud.calls == []  # nothing provisioned, nothing blocked
    assert (await harness.record(handle)).status == ClusterStatus.INIT


async def test_exec_submits_a_new_job_and_is_refused_unless_up(harness: Harness) -> None:
    handle = await harness.cluster()
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ClusterWorkflow.exec, ExecRequest(task=Task(run="true")))
    assert "not UP" in str(refused.value.cause)

    await harness.launch(handle)
    job_id = await handle.execute_update(ClusterWorkflow.exec, ExecRequest(task=Task(run="x")))

    assert job_id == 2


async def test_the_job_table_is_read_and_jobs_cancelled_through_the_workflow(
    harness: Harness,
) -> None:
    handle = await harness.cluster()
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(JOBS_UPDATE, JobsRequest())
    assert "has no head node yet" in str(refused.value.cause)

    await harness.launch(handle)
    await handle.execute_update(ClusterWorkflow.exec, ExecRequest(task=Task(run="x")))
    table = await handle.execute_update(JOBS_UPDATE, JobsRequest(),
                                        result_type=list[JobRecord])
    assert [(j.id, j.status) for j in table] == [(1, JobStatus.RUNNING), (2, JobStatus.RUNNING)]
    table = await handle.execute_update(JOBS_UPDATE, JobsRequest(cancel=[2]),
                                        result_type=list[JobRecord])
    assert [j.status for j in table] == [JobStatus.RUNNING, JobStatus.CANCELLED]
    assert harness.cloud.cancelled == {2}


async def test_down_tears_down_and_ends_the_workflow(harness: Harness) -> None:
    handle = await harness.cluster()
    await harness.launch(handle)
    harness.cloud.calls.clear()

    result: TeardownResult = await handle.execute_update(ClusterWorkflow.down, DownRequest())

    assert harness.cloud.calls == ["stop_ray", "terminate_instances", "wait_instances_gone",
                                   "cleanup_ports"]
    assert "2 instance(s) terminated" in result.message
    final: ClusterRecord = await handle.result()
    assert final.status == ClusterStatus.TERMINATED
    await save_with_children(harness.env.client, handle, "cluster_down")


async def test_down_of_a_cluster_that_never_got_nodes_succeeds(harness: Harness) -> None:
    handle = await harness.cluster()

    result: TeardownResult = await handle.execute_update(ClusterWorkflow.down, DownRequest())

    assert "never provisioned" in result.message
    assert harness.cloud.calls == []


async def _teardown(harness: Harness, request: TeardownInput) -> TeardownResult:
    result: TeardownResult = await harness.env.client.execute_workflow(
        TeardownWorkflow.run, request, id=f"teardown-{uuid.uuid4().hex[:6]}",
        task_queue=harness.task_queue,
    )
    return result


async def test_teardown_when_the_head_is_unreachable_still_terminates(harness: Harness) -> None:
    """SkyPilot's stop/down bug: `ray stop` on a head that is gone failed the teardown."""
    harness.cloud.instances["ghost"]["ghost-0"] = "RUNNING"  # type: ignore[assignment]
    harness.cloud.fail("stop_ray", ApplicationError("head unreachable",
                                                    type="NodeUnreachableError"), times=5)

    result = await _teardown(harness, TeardownInput(
        cluster_name="ghost", placement=Placement(cloud="local", region="local"),
        info=harness.cloud.info("ghost")))

    assert "1 instance(s) terminated" in result.message
    assert result.warnings and "ray stop skipped" in result.warnings[0]
    assert harness.cloud.instances["ghost"] == {}


async def test_teardown_of_a_cluster_with_no_instances_says_so(harness: Harness) -> None:
    result = await _teardown(harness, TeardownInput(
        cluster_name="empty", placement=Placement(cloud="local", region="local")))

    assert "had no instances" in result.message
    assert "stop_ray" not in harness.cloud.calls  # no head to reach
