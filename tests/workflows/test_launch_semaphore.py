"""LaunchSemaphoreWorkflow and the permits helper, on the time-skipping test server.

Holders are real workflows using `workflows.permits.acquire_permit`; the semaphore's
activities run against the test server's client. Grant order and grant counts are read
from the semaphore's own histories (the acquire signals it received and the grant
signals it sent), so they reflect what the server recorded, not what a test double says.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

# Passed through so the sandbox does not re-run these imports for every holder run.
with workflow.unsafe.imports_passed_through():
    import pytest
    from pydantic import BaseModel
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import (
        Client,
        WorkflowExecutionStatus,
        WorkflowHandle,
        WorkflowHistory,
    )
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Replayer, Worker

    from activities.semaphore import SemaphoreActivities
    from workflows.launch_semaphore import (
        ACQUIRE_SIGNAL,
        GRANT_SIGNAL,
        PERMITS_QUERY,
        RELEASE_SIGNAL,
        AcquireRequest,
        LaunchSemaphoreInput,
        LaunchSemaphoreWorkflow,
        PermitGrant,
        PermitKind,
        PermitLimits,
        PoolView,
        ReleaseRequest,
        SemaphoreSettings,
        SemaphoreView,
    )
    from workflows.permits import acquire_permit

HISTORY_FILE = Path(__file__).parent / "histories" / "launch_semaphore.json"
RECORD_ENV = "ORCH_RECORD_HISTORIES"


class HoldInput(BaseModel):
    semaphore_id: str
    kind: PermitKind = "launch"
    hold_for: timedelta = timedelta(seconds=10)


class HoldEvent(BaseModel):
    holder_id: str
    kind: PermitKind
    holding: bool


@workflow.defn
class PermitHolderWorkflow:
    """Takes a permit, reports holding it, keeps it for `hold_for`, reports letting go."""

    @workflow.run
    async def run(self, input: HoldInput) -> None:
        permit = await acquire_permit(input.kind, semaphore_id=input.semaphore_id)
        await self._report(input.kind, holding=True)
        await workflow.sleep(input.hold_for)
        await self._report(input.kind, holding=False)
        await permit.release()

    async def _report(self, kind: PermitKind, *, holding: bool) -> None:
        await workflow.execute_activity(
            "record_hold",
            HoldEvent(holder_id=workflow.info().workflow_id, kind=kind, holding=holding),
            start_to_close_timeout=timedelta(seconds=10),
        )


@dataclass
class HoldRecorder:
    """What holders report, in the order the activities ran."""

    events: list[HoldEvent] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    most_in_flight: Counter[str] = field(default_factory=Counter)

    @activity.defn(name="record_hold")
    async def record_hold(self, event: HoldEvent) -> None:
        self.events.append(event)
        self.in_flight[event.kind] += 1 if event.holding else -1
        self.most_in_flight[event.kind] = max(
            self.most_in_flight[event.kind], self.in_flight[event.kind]
        )


@dataclass
class Harness:
    client: Client
    task_queue: str
    semaphore_id: str
    recorder: HoldRecorder

    async def start_semaphore(self, settings: SemaphoreSettings) -> WorkflowHandle[Any, Any]:
        return await self.client.start_workflow(
            LaunchSemaphoreWorkflow.run,
            LaunchSemaphoreInput(settings=settings),
            id=self.semaphore_id,
            task_queue=self.task_queue,
        )

    async def start_holder(
        self, name: str, kind: PermitKind = "launch", hold_for: timedelta = timedelta(seconds=10)
    ) -> WorkflowHandle[Any, Any]:
        return await self.client.start_workflow(
            PermitHolderWorkflow.run,
            HoldInput(semaphore_id=self.semaphore_id, kind=kind, hold_for=hold_for),
            id=f"{self.semaphore_id}/{name}",
            task_queue=self.task_queue,
        )

    async def view(self) -> SemaphoreView:
        return await self.client.get_workflow_handle(self.semaphore_id).query(
            PERMITS_QUERY, result_type=SemaphoreView
        )

    async def pool(self, kind: PermitKind) -> PoolView:
        return next(p for p in (await self.view()).pools if p.kind == kind)

    async def wait_for_pool(self, kind: PermitKind, *, held: int, waiting: int) -> None:
        """Polls the query (no time skipping happens while the test polls)."""
        for _ in range(400):
            pool = await self.pool(kind)
            if (pool.held, pool.waiting) == (held, waiting):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{kind} pool never reached {held} held, {waiting} waiting: {pool}")

    async def run_histories(self) -> list[WorkflowHistory]:
        """Histories of every run of the semaphore, first run first."""
        handle = self.client.get_workflow_handle(self.semaphore_id)
        first_run_id = (await handle.describe()).raw_description.workflow_execution_info
        run_id: str | None = first_run_id.first_run_id or None
        if run_id is None:
            raise AssertionError("the server did not report the semaphore's first run id")
        histories = []
        while run_id:
            history = await self.client.get_workflow_handle(
                self.semaphore_id, run_id=run_id
            ).fetch_history()
            histories.append(history)
            attrs = history.events[-1].workflow_execution_continued_as_new_event_attributes
            run_id = attrs.new_execution_run_id or None
        return histories


async def acquires_and_grants(
    client: Client, histories: list[WorkflowHistory]
) -> tuple[list[AcquireRequest], list[PermitGrant]]:
    """Acquire signals received and grant signals sent, in history order, over all runs."""
    acquires: list[AcquireRequest] = []
    grants: list[PermitGrant] = []
    converter = client.data_converter
    for history in histories:
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signaled = event.workflow_execution_signaled_event_attributes
                if signaled.signal_name == ACQUIRE_SIGNAL:
                    (request,) = await converter.decode(signaled.input.payloads, [AcquireRequest])
                    acquires.append(request)
            elif (
                event.event_type
                == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            ):
                initiated = event.signal_external_workflow_execution_initiated_event_attributes
                assert initiated.signal_name == GRANT_SIGNAL
                (grant,) = await converter.decode(initiated.input.payloads, [PermitGrant])
                grants.append(grant)
    return acquires, grants


def assert_fifo(acquires: list[AcquireRequest], grants: list[PermitGrant]) -> None:
    for kind in ("launch", "job"):
        arrival = list(dict.fromkeys(a.request_id for a in acquires if a.kind == kind))
        granted = [g.request_id for g in grants if g.kind == kind]
        assert granted == arrival


@pytest.fixture
async def harness(time_skipping_env: WorkflowEnvironment) -> Any:
    client = time_skipping_env.client
    suffix = uuid.uuid4().hex[:8]
    task_queue = f"semaphore-{suffix}"
    recorder = HoldRecorder()
    activities = SemaphoreActivities(
        client, SemaphoreSettings(limits=PermitLimits(launch=2, job=3))
    )
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[LaunchSemaphoreWorkflow, PermitHolderWorkflow],
        activities=[
            activities.request_permit,
            activities.find_closed_permit_holders,
            recorder.record_hold,
        ],
        max_concurrent_activities=100,
    ):
        yield Harness(client, task_queue, f"launch-semaphore-{suffix}", recorder)
        semaphore = client.get_workflow_handle(f"launch-semaphore-{suffix}")
        if (await semaphore.describe()).status == WorkflowExecutionStatus.RUNNING:
            await semaphore.terminate("test over")


async def test_fifo_and_never_more_than_the_limit(harness: Harness) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=4)))
    holders = await asyncio.gather(*(harness.start_holder(f"h{i}") for i in range(50)))

    snapshots: list[PoolView] = []

    async def watch() -> None:
        while True:
            snapshots.append(await harness.pool("launch"))
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.gather(*(h.result() for h in holders))
    finally:
        watcher.cancel()

    assert harness.recorder.most_in_flight["launch"] <= 4
    assert len(harness.recorder.events) == 100
    assert snapshots, "the query never answered"
    for snapshot in snapshots:
        assert snapshot.held <= 4
        # Work-conserving: nobody waits while a permit is free.
        assert snapshot.waiting == 0 or snapshot.held == 4

    acquires, grants = await acquires_and_grants(harness.client, await harness.run_histories())
    assert len(grants) == 50
    assert_fifo(acquires, grants)
    final = await harness.pool("launch")
    assert (final.held, final.waiting) == (0, 0)


async def test_terminated_holder_permit_is_reclaimed(harness: Harness) -> None:
    # The semaphore is created by the first acquire (signal-with-start), with the limits
    # the worker's SemaphoreActivities were built with: launch=2.
    stuck = [await harness.start_holder(f"stuck{i}", hold_for=timedelta(days=365)) for i in (1, 2)]
    await harness.wait_for_pool("launch", held=2, waiting=0)
    patient = await harness.start_holder("patient")
    await harness.wait_for_pool("launch", held=2, waiting=1)

    await stuck[0].terminate("killed mid-hold")
    await patient.result()  # time skips to the next reclaim sweep

    pool = await harness.pool("launch")
    assert [h.request.holder_id for h in pool.holders] == [stuck[1].id]
    assert pool.waiting == 0


async def test_cancelled_waiter_withdraws_its_request(harness: Harness) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1)))
    first = await harness.start_holder("first", hold_for=timedelta(hours=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    impatient = await harness.start_holder("impatient")
    await harness.wait_for_pool("launch", held=1, waiting=1)

    await impatient.cancel()
    await harness.wait_for_pool("launch", held=1, waiting=0)
    await first.result()
    await harness.wait_for_pool("launch", held=0, waiting=0)
    assert [e.holder_id for e in harness.recorder.events] == [first.id, first.id]


async def test_duplicate_acquires_and_unknown_releases(harness: Harness) -> None:
    semaphore = await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1)))
    holder = await harness.start_holder("holder", hold_for=timedelta(hours=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    (held,) = (await harness.pool("launch")).holders

    # A retried request activity delivers the same acquire again: no second permit.
    await semaphore.signal(ACQUIRE_SIGNAL, held.request)
    # A withdrawal that overtook its own acquire: the late acquire must not be queued.
    late = AcquireRequest(
        kind="launch", holder_id="nobody", holder_first_run_id="x", request_id="late"
    )
    await semaphore.signal(RELEASE_SIGNAL, ReleaseRequest(kind="launch", request_id="late"))
    await semaphore.signal(ACQUIRE_SIGNAL, late)
    await harness.wait_for_pool("launch", held=1, waiting=0)

    await holder.result()
    await harness.wait_for_pool("launch", held=0, waiting=0)
    acquires, grants = await acquires_and_grants(harness.client, await harness.run_histories())
    assert [a.request_id for a in acquires] == [held.request.request_id] * 2 + ["late"]
    assert [g.request_id for g in grants] == [held.request.request_id]


async def test_job_slots_limit_independently(harness: Harness) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1, job=3)))
    jobs = await asyncio.gather(
        *(harness.start_holder(f"job{i}", kind="job", hold_for=timedelta(hours=1)) for i in range(6))
    )
    await harness.wait_for_pool("job", held=3, waiting=3)
    launches = await asyncio.gather(*(harness.start_holder(f"launch{i}") for i in range(3)))
    await asyncio.gather(*(h.result() for h in launches))  # not held up by waiting jobs

    pool = await harness.pool("job")
    assert (pool.held, pool.waiting) == (3, 3)
    await asyncio.gather(*(h.result() for h in jobs))
    assert harness.recorder.most_in_flight == Counter({"job": 3, "launch": 1})
    acquires, grants = await acquires_and_grants(harness.client, await harness.run_histories())
    assert len(grants) == 9
    assert_fifo(acquires, grants)


async def test_waiters_survive_continue_as_new(harness: Harness) -> None:
    await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=10), max_events_per_run=150)
    )
    holders = await asyncio.gather(
        *(harness.start_holder(f"w{i}", hold_for=timedelta(seconds=1)) for i in range(200))
    )
    await asyncio.gather(*(h.result() for h in holders))

    histories = await harness.run_histories()
    assert len(histories) > 2, "the semaphore never continued as new"
    acquires, grants = await acquires_and_grants(harness.client, histories)
    granted = Counter(g.request_id for g in grants)
    assert len(granted) == 200
    assert set(granted.values()) == {1}
    assert_fifo(acquires, grants)
    assert harness.recorder.most_in_flight["launch"] <= 10
    final = await harness.pool("launch")
    assert (final.held, final.waiting) == (0, 0)


async def record_history(harness: Harness) -> WorkflowHistory:
    """A short run that exercises grants, a reclaim sweep and continue-as-new."""
    await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=1, job=1), max_events_per_run=60)
    )
    stuck = await harness.start_holder("stuck", hold_for=timedelta(days=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    others = [await harness.start_holder(f"o{i}", kind=k) for i, k in enumerate(["launch", "job"] * 3)]
    await stuck.terminate("killed mid-hold")
    await asyncio.gather(*(h.result() for h in others))
    return (await harness.run_histories())[0]


async def test_replay_recorded_history(harness: Harness) -> None:
    fresh = await record_history(harness)
    assert any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        for e in fresh.events
    )
    if os.environ.get(RECORD_ENV) == "1":
        HISTORY_FILE.parent.mkdir(exist_ok=True)
        HISTORY_FILE.write_text(json.dumps(json.loads(fresh.to_json()), indent=1) + "\n")

    replayer = Replayer(
        workflows=[LaunchSemaphoreWorkflow], data_converter=harness.client.data_converter
    )
    recorded = WorkflowHistory.from_json("launch-semaphore", HISTORY_FILE.read_text())
    for history in (fresh, recorded):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None
