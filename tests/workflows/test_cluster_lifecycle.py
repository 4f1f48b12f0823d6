"""Stop, start, refresh and autostop of ClusterWorkflow on the time-skipping server."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from orch.clouds.base import InstanceStatus
from orch.lifecycle import GONE_REASON, Autostop
from orch.records import (
    AutostopRequest,
    ClusterRecord,
    LaunchRequest,
    StartRequest,
    StopRequest,
)
from orch.spec import Resources, Task
from orch.status import ClusterStatus
from tests.workflows.fake_cloud import ClusterTestbed, FakeCloud, fake_cloud_worker
from tests.workflows.histories import save_with_children
from workflows.cluster import ClusterWorkflow

TASK = Task(num_nodes=2, run="echo hi")


async def record(handle: WorkflowHandle) -> ClusterRecord:
    result: ClusterRecord = await handle.query(ClusterWorkflow.record)
    return result


async def launch(handle: WorkflowHandle, autostop: Autostop | None = None,
                 task: Task = TASK) -> None:
    await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=task,
                                                                      autostop=autostop))


async def test_stop_then_start_resumes_the_same_instances(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle)
        instances = dict(cloud.instances[(await record(handle)).name])

        await handle.execute_update(ClusterWorkflow.stop, StopRequest())
        stopped = await record(handle)
        assert stopped.status == ClusterStatus.STOPPED
        assert set(cloud.instances["life"].values()) == {InstanceStatus.STOPPED}
        assert "terminate_instances" not in cloud.calls

        cloud.calls.clear()
        started: ClusterRecord = await handle.execute_update(ClusterWorkflow.start,
                                                             StartRequest())
        assert started.status == ClusterStatus.UP
        assert cloud.instances["life"].keys() == instances.keys()
        assert set(cloud.instances["life"].values()) == {InstanceStatus.RUNNING}
        assert cloud.calls[:3] == ["plan_candidates", "check_quota", "run_instances"]
        assert "start_ray" in cloud.calls and "run_setup" not in cloud.calls
        await save_with_children(time_skipping_env.client, handle, "cluster_stop_start")


async def test_a_spot_cluster_cannot_be_stopped_and_nothing_is_done(time_skipping_env
                                                                     ) -> None:
    from orch.failover_rules import Candidate

    cloud = FakeCloud([Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"],
                                 instance_type="m5.large", use_spot=True)])
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle, task=Task(run="x", resources=Resources(use_spot=True)))
        cloud.calls.clear()
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(ClusterWorkflow.stop, StopRequest())
        assert "cannot be stopped" in str(refused.value.cause)
        assert cloud.calls == []


async def test_refresh_finds_instances_gone_behind_orchs_back(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle)
        cloud.instances["life"].clear()

        refreshed: ClusterRecord = await handle.execute_update(ClusterWorkflow.refresh)

        assert refreshed.status == ClusterStatus.TERMINATED
        assert refreshed.status_reason == GONE_REASON
        assert (await handle.result()).status == ClusterStatus.TERMINATED


async def test_refresh_marks_a_stopped_node_init_and_names_leaks(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle)
        cloud.instances["life"]["life-1"] = InstanceStatus.STOPPED
        cloud.instances["life"]["life-extra"] = InstanceStatus.RUNNING

        refreshed: ClusterRecord = await handle.execute_update(ClusterWorkflow.refresh)

        assert refreshed.status == ClusterStatus.INIT
        assert "life-1 (STOPPED)" in refreshed.status_reason
        assert any("life-extra" in w for w in refreshed.warnings)


async def test_refresh_with_ray_down_is_init(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle)
        cloud.ray_is_healthy = False
        refreshed: ClusterRecord = await handle.execute_update(ClusterWorkflow.refresh)
        assert refreshed.status == ClusterStatus.INIT
        assert "Ray" in refreshed.status_reason


async def test_refresh_during_a_launch_removes_nothing(time_skipping_env) -> None:
    """SkyPilot #4431: a refresh racing a launch must not remove the cluster."""
    cloud = FakeCloud()
    gate = cloud.hold("start_ray")
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        launching = asyncio.create_task(launch(handle))
        while "start_ray" not in cloud.calls:
            await asyncio.sleep(0.05)
        cloud.instances["life"].clear()  # a cloud whose listing lags behind its API

        refreshed: ClusterRecord = await handle.execute_update(ClusterWorkflow.refresh)

        assert refreshed.status == ClusterStatus.INIT
        assert "query_instances" not in cloud.calls
        gate.set()
        await launching
        assert (await record(handle)).status == ClusterStatus.UP


async def test_autostop_after_idle_minutes(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle, Autostop(idle_minutes=10))
        up = await record(handle)
        assert up.autostop_at is not None

        await time_skipping_env.sleep(timedelta(minutes=9))
        assert (await record(handle)).status == ClusterStatus.UP
        await time_skipping_env.sleep(timedelta(minutes=2))

        stopped = await record(handle)
        assert stopped.status == ClusterStatus.STOPPED
        assert "jobs_activity" in cloud.calls
        # cost-report's clock: one stretch up, from UP to the autostop, none running now.
        [stretch] = stopped.usage.done
        assert 10 * 60 <= stretch.seconds < 11 * 60 and stopped.usage.up_since is None
        await save_with_children(time_skipping_env.client, handle, "cluster_autostop")


async def test_a_job_before_the_deadline_restarts_the_clock(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle, Autostop(idle_minutes=10))
        await time_skipping_env.sleep(timedelta(minutes=9))
        from orch.records import ExecRequest

        await handle.execute_update(ClusterWorkflow.exec, ExecRequest(task=Task(run="x")))
        await time_skipping_env.sleep(timedelta(minutes=5))
        assert (await record(handle)).status == ClusterStatus.UP  # 14 min, 5 idle

        await time_skipping_env.sleep(timedelta(minutes=6))
        assert (await record(handle)).status == ClusterStatus.STOPPED


async def test_a_running_job_keeps_the_cluster_up(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle, Autostop(idle_minutes=10))
        cloud.jobs = cloud.jobs.model_copy(update={"active": True})
        await time_skipping_env.sleep(timedelta(minutes=25))
        assert (await record(handle)).status == ClusterStatus.UP
        cloud.jobs = cloud.jobs.model_copy(update={"active": False})
        await time_skipping_env.sleep(timedelta(minutes=11))
        assert (await record(handle)).status == ClusterStatus.STOPPED


async def test_autodown_fires_even_when_the_worker_restarted_in_between(time_skipping_env
                                                                       ) -> None:
    cloud = FakeCloud()
    bed = ClusterTestbed(time_skipping_env, f"test-{uuid.uuid4().hex[:8]}")
    try:
        async with fake_cloud_worker(time_skipping_env, cloud, testbed=bed):
            handle = await bed.start_cluster("life")
            await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(
                task=TASK, autostop=Autostop(idle_minutes=30, down=True)))
            await time_skipping_env.sleep(timedelta(minutes=10))
        # A new worker: it knows the workflow only from its history, durable timer included.
        async with fake_cloud_worker(time_skipping_env, cloud, testbed=bed):
            await time_skipping_env.sleep(timedelta(minutes=21))
            final: ClusterRecord = await handle.result()
    finally:
        await bed.terminate_all()
    assert final.status == ClusterStatus.TERMINATED
    assert cloud.instances["life"] == {}


async def test_autostop_can_be_cancelled(time_skipping_env) -> None:
    cloud = FakeCloud()
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await bed.start_cluster("life")
        await launch(handle, Autostop(idle_minutes=10))
        await handle.execute_update(ClusterWorkflow.set_autostop, AutostopRequest(setting=None))
        await time_skipping_env.sleep(timedelta(minutes=30))
        assert (await record(handle)).status == ClusterStatus.UP
