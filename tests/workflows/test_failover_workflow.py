"""FailoverWorkflow on the time-skipping server with a scripted fake cloud: hops across
zones, regions and clouds, the attempt table, and --retry-until-up's durable timer."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from orch.failover_rules import HISTORY_HEADERS, Candidate, FailoverAttempt, history_rows
from orch.semaphore import LAUNCH_SEMAPHORE_ID, PERMITS_QUERY, SemaphoreView
from orch.spec import Task
from tests.workflows.fake_cloud import FakeCloud, fake_cloud_worker
from tests.workflows.histories import save_with_children
from workflows.failover import RETRY_ROUND_S, FailoverInput, FailoverWorkflow

TASK = Task(num_nodes=2, run="x")
FIVE = [
    Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a", "us-east-1b"],
              instance_type="p4d.24xlarge", price_per_hour=1.0),
    Candidate(cloud="aws", region="us-west-2", zones=["us-west-2a"],
              instance_type="p4d.24xlarge", price_per_hour=2.0),
    Candidate(cloud="gcp", region="us-central1", zones=["us-central1-a"],
              instance_type="a2-highgpu-8g", price_per_hour=3.0),
    Candidate(cloud="azure", region="eastus", zones=["1"],
              instance_type="Standard_ND96asr_v4", price_per_hour=4.0),
    Candidate(cloud="azure", region="westus2", zones=["1"],
              instance_type="Standard_ND96asr_v4", price_per_hour=5.0),
]


async def run_failover(env, task_queue: str, retry_until_up: bool = False):  # type: ignore[no-untyped-def]
    return await env.client.start_workflow(
        FailoverWorkflow.run,
        FailoverInput(cluster_name="hop", task=TASK, retry_until_up=retry_until_up),
        id=f"failover-{uuid.uuid4().hex[:6]}", task_queue=task_queue,
    )


async def test_failover_over_five_candidates_blocks_zone_region_and_cloud(time_skipping_env
                                                                         ) -> None:
    cloud = FakeCloud(FIVE)
    cloud.no_capacity = {"us-east-1a", "us-east-1b", "1"}
    cloud.no_quota = {"us-west-2"}
    cloud.no_auth = {"gcp"}
    cloud.candidates[4] = cloud.candidates[4].model_copy(update={"zones": ["2"]})
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue)
        output = await handle.result()
        await save_with_children(time_skipping_env.client, handle, "failover_five")

    assert (output.placement.cloud, output.placement.region, output.placement.zone) == (
        "azure", "westus2", "2")
    tried = [(a.candidate.region, a.zone, a.error_type, a.block.describe() if a.block else "")
             for a in output.history]
    assert tried == [
        ("us-east-1", "us-east-1a", "CapacityError", "aws zone us-east-1a (p4d.24xlarge)"),
        ("us-east-1", "us-east-1b", "CapacityError", "aws zone us-east-1b (p4d.24xlarge)"),
        ("us-west-2", "us-west-2a", "QuotaError", "aws region us-west-2"),
        ("us-central1", "us-central1-a", "AuthError", "cloud gcp"),
        ("eastus", "1", "CapacityError", "azure zone 1 (Standard_ND96asr_v4)"),
    ]
    # No RunInstances where the quota check already said no, nor on a cloud without auth.
    assert cloud.calls.count("run_instances") == 4
    # Each partial cluster (the head that came up) was removed before the next try.
    assert cloud.calls.count("terminate_instances") == 5
    assert cloud.instances["hop"].keys() == {"hop-0", "hop-1"}


async def test_when_nothing_works_the_error_carries_the_failover_table(time_skipping_env
                                                                      ) -> None:
    cloud = FakeCloud(FIVE)
    cloud.no_capacity = {"us-east-1a", "us-east-1b", "1"}
    cloud.no_quota = {"us-west-2"}
    cloud.no_auth = {"gcp"}
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "NoResourcesError"
    attempts = [FailoverAttempt.model_validate(a) for a in cause.details[0]["attempts"]]
    rows = history_rows(attempts)
    assert len(rows) == 6 and len(rows[0]) == len(HISTORY_HEADERS)
    assert [r[1] for r in rows] == ["aws", "aws", "aws", "gcp", "azure", "azure"]
    assert rows[-1][9] == "azure zone 1 (Standard_ND96asr_v4)"
    assert cloud.instances["hop"] == {}  # nothing left behind


async def test_retry_until_up_sleeps_without_a_permit_and_succeeds_later(time_skipping_env
                                                                        ) -> None:
    cloud = FakeCloud(FIVE[:1])
    cloud.no_capacity = {"us-east-1a", "us-east-1b"}
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue, retry_until_up=True)
        while len(await handle.query(FailoverWorkflow.attempts)) < 2:
            await asyncio.sleep(0.05)
        # Round one is over: the workflow sleeps on a durable timer, holding no permit.
        semaphore = time_skipping_env.client.get_workflow_handle(LAUNCH_SEMAPHORE_ID)
        for _ in range(100):
            view: SemaphoreView = await semaphore.query(PERMITS_QUERY, result_type=SemaphoreView)
            held = next(p.held for p in view.pools if p.kind == "launch")
            if held == 0:
                break
            await asyncio.sleep(0.05)
        assert held == 0
        cloud.no_capacity = set()  # capacity comes back

        await time_skipping_env.sleep(timedelta(seconds=RETRY_ROUND_S[0]))
        output = await handle.result()

    assert output.placement.zone == "us-east-1a"
    assert len(output.history) == 2  # round one's attempts are kept for the user
    assert cloud.calls.count("plan_candidates") >= 3


async def test_cancel_mid_attempt_removes_its_nodes_and_is_not_a_failed_attempt(
    dev_server: WorkflowEnvironment,  # real time: the cancel reaches a call in flight
) -> None:
    cloud = FakeCloud(FIVE)
    booting = cloud.hold("wait_running")  # the nodes exist, and never come up
    async with fake_cloud_worker(dev_server, cloud) as bed:
        handle = await run_failover(dev_server, bed.task_queue)
        while "wait_running" not in cloud.calls:
            await asyncio.sleep(0.05)
        assert cloud.instances["hop"]

        await handle.cancel()
        while not any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
                      for e in (await handle.fetch_history()).events):
            await asyncio.sleep(0.05)
        booting.set()  # the call in flight returns; only then does the cleanup start
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        semaphore = dev_server.client.get_workflow_handle(LAUNCH_SEMAPHORE_ID)
        view: SemaphoreView = await semaphore.query(PERMITS_QUERY, result_type=SemaphoreView)

    assert isinstance(failure.value.cause, CancelledError)
    assert cloud.instances["hop"] == {}  # the half-made nodes were removed
    assert cloud.calls.count("run_instances") == 1  # no next candidate was tried
    assert next(p for p in view.pools if p.kind == "launch").held == 0
