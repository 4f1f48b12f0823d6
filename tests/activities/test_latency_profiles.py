"""Each cloud at a real cloud's pace: launch, stop, start and tear down (issue 12, part 3).

The fakes answer in milliseconds unless told otherwise; here each gets a latency profile
after its cloud's documented behaviour, scaled down for CI but always longer than the
heartbeat timeout the test runs under (3 s):

============  ===================================  ====================================
cloud         real (issue 12)                      here (seconds)
============  ===================================  ====================================
AWS           pending 20-90 s, shutting-down        pending 5, stopping 5,
              30-60 s                               shutting-down 5
GCP           insert 20-60 s, delete 30-90 s        insert 5, stop 5, start 5, delete 6
Azure         create 90-200 s, delete 60-180 s,     create 6, deallocate 5, start 5,
              resource-group delete longer          delete 5, resource group 7
============  ===================================  ====================================

The story runs FailoverWorkflow (launch), TeardownWorkflow with ``terminate=False`` (stop),
FailoverWorkflow pinned to the placement (start: the stopped nodes resume), TeardownWorkflow
(down), with orch's real activities on a dev server (real time). It passes only if no
activity is retried (none outlived its heartbeat or start-to-close timeout), no failover
attempt failed, and nothing of the cluster is left on the cloud.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orch.records import TeardownInput
from orch.spec import Task
from tests.activities import profiles
from tests.activities.conftest import Moto, activity_runs
from tests.activities.profiles import Cloud
from tests.fakes.ec2_fault_front import EC2FaultFront
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow
from workflows.teardown import TeardownWorkflow


@pytest.fixture
def aws_profile(aws_env: EC2FaultFront, moto: Moto) -> Cloud:
    return profiles.aws(aws_env, moto, {"pending": 5, "stopping": 5, "shutting-down": 5})


@pytest.fixture
def gcp_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Cloud]:
    with profiles.gcp(monkeypatch, tmp_path,
                      {"insert": 5, "stop": 5, "start": 5, "delete": 6}) as cloud:
        yield cloud


@pytest.fixture
def azure_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Cloud]:
    with profiles.azure(monkeypatch, tmp_path, {
            "VirtualMachines_CreateOrUpdate": 6, "VirtualMachines_Deallocate": 5,
            "VirtualMachines_Start": 5, "VirtualMachines_Delete": 5,
            "ResourceGroups_Delete": 7}) as cloud:
        yield cloud


@pytest.fixture(params=["aws", "gcp", "azure"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    return request.getfixturevalue(f"{request.param}_profile")


async def run(env: WorkflowEnvironment, queue: str, workflow: Any, request: Any
              ) -> tuple[Any, WorkflowHandle[Any, Any]]:
    handle = await env.client.start_workflow(workflow, request, task_queue=queue,
                                             id=f"profile/{uuid.uuid4().hex[:12]}")
    return await handle.result(), handle


async def retried(handles: list[WorkflowHandle[Any, Any]]) -> list[str]:
    """Every activity run past its first attempt, over all the story's workflows, with
    why the attempt before failed."""
    return [f"{name} attempt {run.attempt} after {run.last_failure}" for handle in handles
            for name, run in await activity_runs(handle) if run.attempt > 1]


async def test_launch_stop_start_down_at_the_clouds_pace(
    dev_server: WorkflowEnvironment, real_time_queue: str, short_heartbeats: None,
    cloud: Cloud, cluster_name: str,
) -> None:
    task = Task(name="profile", num_nodes=2, resources=cloud.resources)
    launched: FailoverOutput
    launched, first = await run(dev_server, real_time_queue, FailoverWorkflow.run,
                                FailoverInput(cluster_name=cluster_name, task=task))
    placement = launched.placement
    _, stop = await run(dev_server, real_time_queue, TeardownWorkflow.run, TeardownInput(
        cluster_name=cluster_name, placement=placement, terminate=False))
    started: FailoverOutput
    started, start = await run(dev_server, real_time_queue, FailoverWorkflow.run, FailoverInput(
        cluster_name=cluster_name, task=task, placement=placement, was_up=True))
    _, down = await run(dev_server, real_time_queue, TeardownWorkflow.run, TeardownInput(
        cluster_name=cluster_name, placement=placement))

    assert launched.history == [] and started.history == []
    assert len(started.info.nodes) == 2
    assert await retried([first, stop, start, down]) == []
    assert cloud.left(cluster_name) == {}
