"""LaunchSemaphoreWorkflow and the permits helper, on the time-skipping test server.

Holders are real workflows using `workflows.permits.acquire_permit`; the semaphore's
activities run against the test server's client. Grant order and grant counts are read
from the semaphore's own histories (the acquire signals it received and the grant
signals it sent), so they reflect what the server recorded, not what a test double says.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.semaphore import SemaphoreActivities
from bench.semaphore_fairness import semaphore_run_histories
from orch.semaphore import (
    ACQUIRE_SIGNAL,
    FIND_CLOSED_HOLDERS_ACTIVITY,
    GRANT_SIGNAL,
    PERMITS_QUERY,
    RELEASE_MANY_SIGNAL,
    RELEASE_SIGNAL,
    REQUEST_PERMIT_ACTIVITY,
    AcquireRequest,
    LaunchSemaphoreInput,
    PermitGrant,
    PermitKind,
    PermitLimits,
    PermitRequest,
    PoolView,
    ReleaseRequest,
    SemaphoreSettings,
    SemaphoreView,
)
from tests.workflows.histories import latest, load, save_with_children
from workflows.launch_semaphore import (
    JOB_GRANTS_IN_FLIGHT,
    LAUNCH_HOLDERS_ATTRIBUTE,
    LAUNCH_WAITING_ATTRIBUTE,
    LaunchSemaphoreWorkflow,
)
from workflows.permits import acquire_permit

# The holder workflow below lives in this module; the sandbox passes the module through
# instead of re-importing it (and pytest re-rewriting its asserts) for every holder run.
# LaunchSemaphoreWorkflow's own module is still imported fresh into each sandbox.
SANDBOX = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__)
)

HISTORY_NAME = "launch_semaphore"
RESULT_WAIT_S = 90  # real seconds for one holder to finish; seconds at most here


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
    """What holders report, in the order the activities ran. A retried report (time
    skipping can time out an activity that is slow to finish) counts once."""

    events: list[HoldEvent] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    most_in_flight: Counter[str] = field(default_factory=Counter)
    reported: set[tuple[str, bool]] = field(default_factory=set)

    @activity.defn(name="record_hold")
    async def record_hold(self, event: HoldEvent) -> None:
        report = (activity.info().workflow_run_id or "", event.holding)
        if report in self.reported:
            return
        self.reported.add(report)
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
    started: list[WorkflowHandle[Any, Any]] = field(default_factory=list)
    gated_requests: GatedRequests | None = None

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
        handle = await self.client.start_workflow(
            PermitHolderWorkflow.run,
            HoldInput(semaphore_id=self.semaphore_id, kind=kind, hold_for=hold_for),
            id=f"{self.semaphore_id}/{name}",
            task_queue=self.task_queue,
        )
        self.started.append(handle)
        return handle

    async def terminate_all(self) -> None:
        """Leaves nothing running: a workflow whose timer fires after its worker is gone
        holds the shared time-skipping server's clock still for every later test."""
        handles = [*self.started, self.client.get_workflow_handle(self.semaphore_id)]
        for handle in handles:
            with contextlib.suppress(RPCError):  # already closed, or never started
                await handle.terminate("test over")

    async def view(self) -> SemaphoreView:
        return await self.client.get_workflow_handle(self.semaphore_id).query(
            PERMITS_QUERY, result_type=SemaphoreView
        )

    async def pool(self, kind: PermitKind) -> PoolView:
        return next(p for p in (await self.view()).pools if p.kind == kind)

    async def wait_for_pool(self, kind: PermitKind, *, held: int, waiting: int) -> None:
        """Polls the query (no time skipping happens while the test polls); the
        semaphore may not exist yet when the first holder's request starts it."""
        pool: PoolView | None = None
        for _ in range(400):
            try:
                pool = await self.pool(kind)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
            if pool and (pool.held, pool.waiting) == (held, waiting):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{kind} pool never reached {held} held, {waiting} waiting: {pool}")

    async def finish(self, *handles: WorkflowHandle[Any, Any]) -> None:
        """Waits for each holder in turn: each wait lets the time-skipping server skip
        time, and concurrent waits upset its count of who holds time still. Bounded in
        real time, so that a lost grant fails the test (with the semaphore's view)
        instead of hanging it."""
        for handle in handles:
            try:
                await asyncio.wait_for(handle.result(), timeout=RESULT_WAIT_S)
            except TimeoutError:
                raise AssertionError(f"{handle.id} never finished: {await self.view()}") from None

    async def run_histories(self) -> list[WorkflowHistory]:
        return await semaphore_run_histories(self.client, self.semaphore_id)


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


@dataclass
class GatedRequests:
    """The request_permit activity held at a gate until the test opens it: lets a test
    cancel a holder while its acquire is still on its way to the semaphore."""

    inner: SemaphoreActivities
    started: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    @activity.defn(name=REQUEST_PERMIT_ACTIVITY)
    async def request_permit(self, permit: PermitRequest) -> None:
        self.started.set()
        await self.gate.wait()
        await self.inner.request_permit(permit)


@contextlib.asynccontextmanager
async def running_harness(client: Client, *, gated: bool = False) -> AsyncIterator[Harness]:
    """A worker on a fresh task queue hosting the semaphore, the holders and their
    activities; the worker's own settings (launch=2, job=3) apply when the first
    acquire starts the semaphore. With ``gated`` the acquires wait at
    ``harness.gated_requests``."""
    suffix = uuid.uuid4().hex[:8]
    task_queue = f"semaphore-{suffix}"
    recorder = HoldRecorder()
    activities = SemaphoreActivities(
        client, SemaphoreSettings(limits=PermitLimits(launch=2, job=3))
    )
    gated_requests = GatedRequests(activities) if gated else None
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[LaunchSemaphoreWorkflow, PermitHolderWorkflow],
        workflow_runner=SANDBOX,
        activities=[
            gated_requests.request_permit if gated_requests else activities.request_permit,
            activities.find_closed_permit_holders,
            recorder.record_hold,
        ],
        max_concurrent_activities=100,
    ):
        harness = Harness(client, task_queue, f"launch-semaphore-{suffix}", recorder,
                          gated_requests=gated_requests)
        try:
            yield harness
        finally:
            await harness.terminate_all()


@pytest.fixture
async def harness(time_skipping_env: WorkflowEnvironment) -> AsyncIterator[Harness]:
    async with running_harness(time_skipping_env.client) as harness:
        yield harness


@pytest.fixture
async def dev_server_harness(dev_server: WorkflowEnvironment) -> AsyncIterator[Harness]:
    async with running_harness(dev_server.client) as harness:
        yield harness


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
        await harness.finish(*holders)
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
    await harness.finish(patient)  # time skips to the next reclaim sweep

    pool = await harness.pool("launch")
    assert [h.request.holder_id for h in pool.holders] == [stuck[1].id]
    assert pool.waiting == 0


async def test_job_slots_are_checked_only_while_a_job_waits(harness: Harness) -> None:
    async def described_kinds() -> list[set[PermitKind]]:
        """The kinds of the holders each reclaim sweep described, in order."""
        sweeps = []
        for history in await harness.run_histories():
            for event in history.events:
                scheduled = event.activity_task_scheduled_event_attributes
                if (event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                        and scheduled.activity_type.name == FIND_CLOSED_HOLDERS_ACTIVITY):
                    (holders,) = await harness.client.data_converter.decode(
                        scheduled.input.payloads, [list[AcquireRequest]])
                    sweeps.append({h.kind for h in holders})
        return sweeps

    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1, job=1)))
    running_job = await harness.start_holder("job", kind="job", hold_for=timedelta(minutes=10))
    await harness.wait_for_pool("job", held=1, waiting=0)
    launch = await harness.start_holder("launch", hold_for=timedelta(minutes=3))
    await harness.finish(launch)  # minutes pass: sweeps of the launch permit only
    assert await described_kinds() and all(k == {"launch"} for k in await described_kinds())

    queued_job = await harness.start_holder("queued", kind="job")
    await harness.wait_for_pool("job", held=1, waiting=1)
    await harness.finish(running_job, queued_job)
    assert any("job" in kinds for kinds in await described_kinds())


async def test_permit_of_a_dead_holder_whose_id_was_reused_is_reclaimed(
    harness: Harness,
) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1)))
    dead = await harness.start_holder("reused", hold_for=timedelta(days=365))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    await dead.terminate("killed mid-hold")
    # A new workflow with the same id is running, but it is not the holder.
    successor = await harness.start_holder("reused")
    await harness.wait_for_pool("launch", held=1, waiting=1)

    await harness.finish(successor)
    # The dead holder reported holding and never let go; then the successor held.
    assert [e.holding for e in harness.recorder.events] == [True, True, False]


async def test_cancelled_waiter_withdraws_its_request(harness: Harness) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1)))
    first = await harness.start_holder("first", hold_for=timedelta(hours=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    impatient = await harness.start_holder("impatient")
    await harness.wait_for_pool("launch", held=1, waiting=1)

    await impatient.cancel()
    await harness.wait_for_pool("launch", held=1, waiting=0)
    await harness.finish(first)
    await harness.wait_for_pool("launch", held=0, waiting=0)
    assert [e.holder_id for e in harness.recorder.events] == [first.id, first.id]


async def test_holder_cancelled_while_its_acquire_is_in_flight_withdraws_it(
    dev_server: WorkflowEnvironment,
) -> None:
    # On the dev server: the gated request completes after its workflow closed.
    async with running_harness(dev_server.client, gated=True) as harness:
        gated = harness.gated_requests
        assert gated is not None
        await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1)))
        hasty = await harness.start_holder("hasty")
        await asyncio.wait_for(gated.started.wait(), timeout=RESULT_WAIT_S)

        await hasty.cancel()  # the request activity is cancelled mid-call
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(hasty.result(), timeout=RESULT_WAIT_S)
        gated.gate.set()  # ... and its acquire reaches the semaphore after the withdrawal

        for _ in range(400):
            acquires, grants = await acquires_and_grants(
                harness.client, await harness.run_histories()
            )
            if acquires:
                break
            await asyncio.sleep(0.05)
        assert len(acquires) == 1, "the late acquire never arrived"
        assert grants == [], "a permit was granted to a holder that had withdrawn"
        pool = await harness.pool("launch")
        assert (pool.held, pool.waiting) == (0, 0)


async def test_release_after_the_semaphore_is_gone(harness: Harness) -> None:
    semaphore = await harness.start_semaphore(SemaphoreSettings())
    holder = await harness.start_holder("orphan", hold_for=timedelta(hours=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    await semaphore.terminate("operator removed it")
    await harness.finish(holder)  # the release finds no semaphore, and the holder still succeeds


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

    await harness.finish(holder)
    await harness.wait_for_pool("launch", held=0, waiting=0)
    acquires, grants = await acquires_and_grants(harness.client, await harness.run_histories())
    assert [a.request_id for a in acquires] == [held.request.request_id] * 2 + ["late"]
    assert [g.request_id for g in grants] == [held.request.request_id]


async def test_job_slots_limit_independently(harness: Harness) -> None:
    await harness.start_semaphore(SemaphoreSettings(limits=PermitLimits(launch=1, job=3)))
    jobs = await asyncio.gather(
        *(
            harness.start_holder(f"job{i}", kind="job", hold_for=timedelta(hours=1))
            for i in range(6)
        )
    )
    await harness.wait_for_pool("job", held=3, waiting=3)
    launches = await asyncio.gather(*(harness.start_holder(f"launch{i}") for i in range(3)))
    await harness.finish(*launches)  # not held up by waiting jobs

    pool = await harness.pool("job")
    assert (pool.held, pool.waiting) == (3, 3)
    await harness.finish(*jobs)
    assert harness.recorder.most_in_flight == Counter({"job": 3, "launch": 1})
    acquires, grants = await acquires_and_grants(harness.client, await harness.run_histories())
    assert len(grants) == 9
    assert_fifo(acquires, grants)


async def test_many_job_slots_given_back_in_one_signal_go_to_the_waiters(
    harness: Harness,
) -> None:
    semaphore = await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=1, job=3)))
    jobs = await asyncio.gather(*(
        harness.start_holder(f"job{i}", kind="job", hold_for=timedelta(hours=1))
        for i in range(5)))
    await harness.wait_for_pool("job", held=3, waiting=2)
    pool = await harness.pool("job")
    held, waiting = pool.holders, [w.holder_id for w in pool.waiters]

    # What the bulk teardown sends once the clusters of cancelled jobs are gone, with an
    # id nobody holds among them.
    await semaphore.signal(RELEASE_MANY_SIGNAL, [
        *(ReleaseRequest(kind="job", request_id=h.request.request_id) for h in held[:2]),
        ReleaseRequest(kind="job", request_id="unknown")])
    await harness.wait_for_pool("job", held=3, waiting=0)

    granted_to = {h.request.holder_id for h in (await harness.pool("job")).holders}
    assert granted_to == {held[2].request.holder_id, *waiting}
    for job in jobs:
        await job.terminate("test over")


async def test_waiters_survive_continue_as_new(harness: Harness) -> None:
    await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=10), max_events_per_run=150)
    )
    holders = await asyncio.gather(
        *(harness.start_holder(f"w{i}", hold_for=timedelta(seconds=1)) for i in range(200))
    )
    await harness.finish(*holders)

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


async def test_a_steady_flow_of_grants_does_not_keep_a_run_from_continuing_as_new(
    harness: Harness,
) -> None:
    """Job slots handed on as fast as holders give them back (40 slots, 400 jobs that
    release at once): some grant is always in flight, so a run that waited for a lull to
    continue as new grew without bound. It pauses its grants instead, and the next run
    hands out what came free meanwhile."""
    max_events = 150
    await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(job=40), max_events_per_run=max_events)
    )
    holders = await asyncio.gather(*(
        harness.start_holder(f"j{i}", kind="job", hold_for=timedelta(0))
        for i in range(400)))
    await harness.finish(*holders)

    histories = await harness.run_histories()
    lengths = [len(h.events) for h in histories]
    # Before the pause the first run took all of it (1,792 events). It still records the
    # 400 acquires that arrive at once (an event each, and workflow tasks around them).
    assert lengths[0] < max_events + 2 * len(holders), lengths
    assert len(histories) > 3 and max(lengths[1:]) < 2 * max_events, lengths
    acquires, grants = await acquires_and_grants(harness.client, histories)
    assert Counter(g.request_id for g in grants) == Counter({a.request_id: 1 for a in acquires})
    assert len(acquires) == 400 and harness.recorder.most_in_flight["job"] <= 40
    final = await harness.pool("job")
    assert (final.held, final.waiting) == (0, 0)


def most_grants_in_flight(history: WorkflowHistory) -> int:
    """The most grant signals initiated and not yet answered at any point of a run."""
    in_flight: set[int] = set()
    most = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            in_flight.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
            in_flight.discard(
                event.external_workflow_execution_signaled_event_attributes.initiated_event_id)
        elif event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED:
            in_flight.discard(
                event.signal_external_workflow_execution_failed_event_attributes
                .initiated_event_id)
        most = max(most, len(in_flight))
    return most


async def test_job_slots_granted_at_once_hold_up_neither_launches_nor_continue_as_new(
    harness: Harness,
) -> None:
    """250 jobs ask for a slot at once: at most JOB_GRANTS_IN_FLIGHT slot grants are under
    way at a time, a launch asking meanwhile gets its permit, and a run whose
    continue-as-new is due hands the grants it has not sent to the next run. Before, a
    run sent every grant first (500 at once): 2,000 jobs submitted together stalled
    every launch for minutes, and the first run reached 10,000 events."""
    jobs, max_events = 250, 150
    await harness.start_semaphore(SemaphoreSettings(
        limits=PermitLimits(launch=1, job=300), max_events_per_run=max_events))
    await asyncio.gather(*(harness.start_holder(f"j{i}", kind="job", hold_for=timedelta(hours=1))
                           for i in range(jobs)))
    await harness.finish(await harness.start_holder("launch"))
    for _ in range(1200):  # every job holds its slot (the test polls: no time is skipped)
        if sum(e.kind == "job" for e in harness.recorder.events) == jobs:
            break
        await asyncio.sleep(0.05)
    assert sum(e.kind == "job" for e in harness.recorder.events) == jobs

    histories = await harness.run_histories()
    acquires, grants = await acquires_and_grants(harness.client, histories)
    assert Counter(g.request_id for g in grants) == Counter({a.request_id: 1 for a in acquires})
    assert_fifo(acquires, grants)
    _, first_run_grants = await acquires_and_grants(harness.client, histories[:1])
    assert len(first_run_grants) < jobs, "the first run sent every grant before continuing"
    assert max(most_grants_in_flight(h) for h in histories) <= JOB_GRANTS_IN_FLIGHT + 1


async def test_launch_counts_are_published_as_search_attributes(
    dev_server_harness: Harness,
) -> None:
    harness = dev_server_harness
    semaphore = await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=1), publish_search_attributes=True)
    )
    await harness.start_holder("holder", hold_for=timedelta(hours=1))
    await harness.start_holder("waiter")
    await harness.wait_for_pool("launch", held=1, waiting=1)
    for _ in range(400):
        attributes = (await semaphore.describe()).typed_search_attributes
        counts = (
            attributes.get(LAUNCH_HOLDERS_ATTRIBUTE),
            attributes.get(LAUNCH_WAITING_ATTRIBUTE),
        )
        if counts == (1, 1):
            break
        await asyncio.sleep(0.05)
    assert counts == (1, 1)


async def record_history(harness: Harness) -> WorkflowHistory:
    """A short scenario whose first semaphore run sees acquires from both pools, grants,
    releases, a reclaim sweep that frees a terminated holder's permit, and ends in
    continue-as-new. Saved under ORCH_RECORD_HISTORIES=1 (tests/workflows/histories.py)."""
    await harness.start_semaphore(
        SemaphoreSettings(limits=PermitLimits(launch=1, job=1), max_events_per_run=80)
    )
    stuck = await harness.start_holder("stuck", hold_for=timedelta(days=1))
    await harness.wait_for_pool("launch", held=1, waiting=0)
    kinds: list[PermitKind] = ["launch", "job"] * 3
    others = [await harness.start_holder(f"o{i}", kind=kind) for i, kind in enumerate(kinds)]
    await stuck.terminate("killed mid-hold")
    await harness.finish(*others)
    first_run = (await harness.run_histories())[0]
    await save_with_children(
        harness.client,
        harness.client.get_workflow_handle(harness.semaphore_id, run_id=first_run.run_id),
        HISTORY_NAME,
    )
    return first_run


async def test_replay_recorded_history(harness: Harness) -> None:
    fresh = await record_history(harness)
    event_types = {e.event_type for e in fresh.events}
    assert {
        EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    } <= event_types

    replayer = Replayer(
        workflows=[LaunchSemaphoreWorkflow], data_converter=harness.client.data_converter
    )
    recorded = load(latest(HISTORY_NAME))
    for history in (fresh, recorded):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None
