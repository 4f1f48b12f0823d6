"""FailoverWorkflow on the time-skipping server with a scripted fake cloud: hops across
zones, regions and clouds, the attempt table, and --retry-until-up's durable timer."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from orch import failover_rules
from orch.failover_rules import (
    HISTORY_HEADERS,
    RETRIES_PER_ZONE,
    THROTTLE_BACKOFF_S,
    Candidate,
    FailoverAttempt,
    history_rows,
)
from orch.semaphore import LAUNCH_SEMAPHORE_ID, PERMITS_QUERY, SemaphoreView
from orch.spec import Task
from tests.workflows.fake_cloud import FakeCloud, fake_cloud_worker, provision_error
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


async def run_failover(env, task_queue: str, retry_until_up: bool = False,  # type: ignore[no-untyped-def]
                       **fields):
    return await env.client.start_workflow(
        FailoverWorkflow.run,
        FailoverInput(cluster_name="hop", task=TASK, retry_until_up=retry_until_up, **fields),
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


async def fail_everywhere(env: WorkflowEnvironment) -> tuple[FakeCloud, ApplicationError]:
    """The five candidates, each refused (6 attempts): the fake cloud and the failure."""
    cloud = FakeCloud(FIVE)
    cloud.no_capacity = {"us-east-1a", "us-east-1b", "1"}
    cloud.no_quota = {"us-west-2"}
    cloud.no_auth = {"gcp"}
    async with fake_cloud_worker(env, cloud) as bed:
        handle = await run_failover(env, bed.task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "NoResourcesError"
    return cloud, cause


async def test_when_nothing_works_the_error_carries_the_failover_table(time_skipping_env
                                                                      ) -> None:
    cloud, cause = await fail_everywhere(time_skipping_env)
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


# -- failover always ends ---------------------------------------------------------------
ONE_ZONE_EACH = [
    Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"],
              instance_type="p4d.24xlarge", price_per_hour=1.0),
    Candidate(cloud="aws", region="us-west-2", zones=["us-west-2a"],
              instance_type="p4d.24xlarge", price_per_hour=2.0),
]
ENDS_WITHIN_S = 60  # of real time: a failover that re-plans one place forever never ends


def timers(history: WorkflowHistory) -> list[timedelta]:
    return [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]


async def test_a_persistent_transient_error_blocks_its_zone_after_the_retry_limit(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud(ONE_ZONE_EACH)
    cloud.zone_errors["us-east-1a"] = provision_error("TransientError", "InternalError", "none")
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue)
        output = await asyncio.wait_for(handle.result(), ENDS_WITHIN_S)
        history = await handle.fetch_history()

    assert output.placement.zone == "us-west-2a"
    assert [(a.zone, a.block.describe() if a.block else None) for a in output.history] == [
        ("us-east-1a", None), ("us-east-1a", None),
        ("us-east-1a", "aws zone us-east-1a (p4d.24xlarge)")]
    assert output.history[-1].block.reason == f"TransientError x{RETRIES_PER_ZONE}"  # type: ignore[union-attr]
    assert timers(history) == []  # a passing fault (not throttling) is retried at once


async def test_a_persistent_transient_error_everywhere_ends_with_no_resources(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud(ONE_ZONE_EACH[:1])
    cloud.zone_errors["us-east-1a"] = provision_error("TransientError", "InternalError", "none")
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), ENDS_WITHIN_S)
        await save_with_children(time_skipping_env.client, handle, "failover_transient_limit")

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "NoResourcesError"
    attempts = [FailoverAttempt.model_validate(a) for a in cause.details[0]["attempts"]]
    assert len(attempts) == RETRIES_PER_ZONE
    assert [a.error_type for a in attempts] == ["TransientError"] * RETRIES_PER_ZONE
    assert cloud.calls.count("run_instances") == RETRIES_PER_ZONE


async def test_persistent_throttling_backs_off_without_a_permit_then_moves_on(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud(ONE_ZONE_EACH)
    cloud.zone_errors["us-east-1a"] = provision_error(
        "TransientError", "RequestLimitExceeded", "none")
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue)
        output = await asyncio.wait_for(handle.result(), ENDS_WITHIN_S)
        history = await handle.fetch_history()
        await save_with_children(time_skipping_env.client, handle, "failover_throttled")

    assert output.placement.zone == "us-west-2a"
    assert [a.code for a in output.history] == ["RequestLimitExceeded"] * RETRIES_PER_ZONE
    # A durable wait after each throttled try that left the zone open; none after the last.
    assert timers(history) == [timedelta(seconds=s) for s in THROTTLE_BACKOFF_S]
    # Each wait starts after the permit went back, and a new one is asked for after it.
    kinds = [e.event_type for e in history.events if e.event_type in (
        EventType.EVENT_TYPE_TIMER_STARTED,
        EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)]
    for at in [i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_TIMER_STARTED]:
        released = [i for i in range(at) if kinds[i] ==
                    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED]
        assert released and released[-1] == at - 1


async def test_the_history_kept_is_bounded_and_counts_the_rest(
    time_skipping_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(failover_rules, "HISTORY_KEPT", 4)
    _, cause = await fail_everywhere(time_skipping_env)
    details = cause.details[0]
    attempts = [FailoverAttempt.model_validate(a) for a in details["attempts"]]
    assert details["older_attempts"] == 2  # 6 attempts: the first 2 only counted
    assert [a.candidate.region for a in attempts] == ["us-west-2", "us-central1", "eastus",
                                                      "westus2"]
    assert [r[0] for r in history_rows(attempts, details["older_attempts"])] == [
        "3", "4", "5", "6"]


async def test_retry_until_up_continues_as_new_and_then_succeeds(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    cloud = FakeCloud(FIVE[:1])
    cloud.no_capacity = {"us-east-1a", "us-east-1b"}
    # Capacity comes back after two rounds (two runs, four tries): counted by the fake, not
    # timed by the test, so the third run cannot have tried a zone before it does.
    cloud.capacity_returns_after = 4
    async with fake_cloud_worker(time_skipping_env, cloud) as bed:
        handle = await run_failover(time_skipping_env, bed.task_queue, retry_until_up=True,
                                    rounds_per_run=1)
        first_run = handle.result_run_id
        output = await handle.result()
        first_handle = time_skipping_env.client.get_workflow_handle(handle.id, run_id=first_run)
        first = await first_handle.fetch_history()
        await save_with_children(time_skipping_env.client, first_handle,
                                 "failover_continued_as_new")

    assert first.events[-1].event_type == (
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert output.placement.zone == "us-east-1a"
    assert len(output.history) == 4  # every earlier run's attempts came along
    assert {a.zone for a in output.history} == {"us-east-1a", "us-east-1b"}
