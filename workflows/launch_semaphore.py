"""LaunchSemaphoreWorkflow (`launch-semaphore`): the control plane's global permit counter.

Two independent FIFO pools live in one workflow: "launch" permits (default 16), held by
every `orch launch` and managed-job launch while it provisions, and "job" slots (default
2,000), held by every running managed job.

Protocol (signals only, never blocking Updates: a workflow admits only 10 in-flight
Updates, so a waiting room of Updates stalls at 10):

- A holder workflow sends ``acquire`` (`AcquireRequest`: kind, its workflow id, its
  first run id and a fresh request id). It does so through the ``request_permit``
  activity (activities/semaphore.py), which uses signal-with-start: a workflow cannot
  signal-with-start, and this way the semaphore is created on first use and re-created
  if it was ever terminated, with the limits configured on the worker.
- When a permit is free the semaphore signals ``orch_permit_granted`` (`PermitGrant`)
  back to the holder; workflows/permits.py waits for it. Launch grants go out before job
  slots' (a launch holds a permit others wait for; a job slot's holder only waits to
  launch), and at most ``JOB_GRANTS_IN_FLIGHT`` job-slot grants are under way at once.
- The holder sends ``release`` (`ReleaseRequest`) when done, or to withdraw a request
  it no longer wants (it was cancelled while waiting). ``release_many`` (a list of them)
  gives many back at once: the bulk teardown sends the job slots of cancelled jobs that
  way once their clusters are gone (``workflows/bulk_teardown.py``).

Duplicates: an ``acquire`` whose request id is waiting, held or recently finished is
ignored, so a retried activity never gets a second permit. A ``release`` of an unknown
request id is ignored, but the id is remembered, so an ``acquire`` that arrives after
its own withdrawal (a cancelled activity still in flight) is not granted.

Reclaiming permits of holders that closed without releasing: holders are not child
workflows (they have parents of their own: ClusterWorkflow, ManagedJobWorkflow), so the
semaphore checks on them. While at least one permit is held, a durable timer fires every
``reclaim_interval``; then one ``find_closed_permit_holders`` activity describes the
holders through the Temporal client and the semaphore frees the permits of holders that
are closed, unknown to the server, or whose workflow id now belongs to another run chain
(the first run id differs). Launch permits (a few, held for minutes) are always checked.
Job slots are held by running managed jobs for hours, up to 2,000 of them, and those
jobs give them back on every way out but termination; a leaked slot only matters to a
job waiting for one, so job slots are checked only while a job waits (2,000 describe
calls a minute otherwise, for nothing). One activity per sweep keeps this workflow's
history small whatever the number of holders; no timer runs while nothing is held. A
holder that dies while still waiting is dropped when its turn comes: the grant signal
fails with "external workflow not found" and the permit goes to the next waiter.

Continue-as-new: when the server suggests it or after ``max_events_per_run`` events,
the workflow stops granting and sending grants (acquires and releases are still
recorded; a freed permit waits for the next run), waits until the grant signals under
way are delivered, no reclaim sweep is in flight and all handlers have finished, then
continues as new with its whole state (holders, waiters, grants not sent yet, dedup
keys, next sweep time) in `SemaphoreState`; the next run sends the grants it was handed,
then grants what is free. Without the pause, a steady flow of grants always has one in flight
and the run never ends (13,500 events were seen at 2,000 jobs; the server's limit is
51,200). Signals that arrive during
the switch are not lost: the server rejects the continue-as-new completion while new
signals are pending and the SDK replays the task with them included.

Visibility: the ``permits`` query returns both pools (holders, waiters and counts). With
``publish_search_attributes`` the launch pool's counts are upserted as OrchLaunchHolders
and OrchLaunchWaiting (Int); this is off by default because the time-skipping test
server has no custom search attributes (the embedded dev server registers them).

The limits are read from the workflow input, so a changed configuration takes effect
when the semaphore is next started, not by signalling a running one.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orch.semaphore import (
        ACQUIRE_SIGNAL,
        FIND_CLOSED_HOLDERS_ACTIVITY,
        FINISHED_REQUESTS_KEPT,
        GRANT_SIGNAL,
        LAUNCH_SEMAPHORE_WORKFLOW,
        PERMIT_KINDS,
        PERMITS_QUERY,
        RELEASE_MANY_SIGNAL,
        RELEASE_SIGNAL,
        SA_LAUNCH_HOLDERS,
        SA_LAUNCH_WAITING,
        AcquireRequest,
        LaunchSemaphoreInput,
        PermitGrant,
        PermitHolder,
        PermitKind,
        PoolView,
        ReleaseRequest,
        SemaphoreView,
    )


LAUNCH_HOLDERS_ATTRIBUTE = SearchAttributeKey.for_int(SA_LAUNCH_HOLDERS)
LAUNCH_WAITING_ATTRIBUTE = SearchAttributeKey.for_int(SA_LAUNCH_WAITING)

# Grant signals sent at once; Temporal allows 2,000 pending outgoing signals per workflow.
GRANTS_IN_FLIGHT = 500
# Job-slot grants sent at once (with LAUNCH_GRANTS_FIRST_PATCH): 2,000 jobs submitted
# together no longer put 500 signals in one workflow task (it timed out), and a launch
# permit freed meanwhile goes out before them.
JOB_GRANTS_IN_FLIGHT = 100
# workflow.patched id: grants pause while a due continue-as-new waits (histories recorded
# before it granted on, and continued as new only in a lull).
PAUSE_FOR_CONTINUE_AS_NEW_PATCH = "semaphore-pause-grants-for-continue-as-new"
# workflow.patched id: launch grants are sent before job slots', job slots at most
# JOB_GRANTS_IN_FLIGHT at once, and grants not sent when a continue-as-new is due are
# carried to the next run (before, the run sent them all first, and 2,000 job slots
# granted at once stalled every launch permit for minutes).
LAUNCH_GRANTS_FIRST_PATCH = "semaphore-launch-grants-first"


@workflow.defn(name=LAUNCH_SEMAPHORE_WORKFLOW)
class LaunchSemaphoreWorkflow:
    @workflow.init
    def __init__(self, input: LaunchSemaphoreInput) -> None:
        self._settings = input.settings
        self._state = input.state
        self._known_request_ids = set(self._state.finished_request_ids)
        for pool in (self._state.launch, self._state.job):
            self._known_request_ids.update(h.request.request_id for h in pool.holders)
            self._known_request_ids.update(w.request_id for w in pool.waiters)
        granted = {h.request.request_id: h for h in self._state.all_holders()}
        self._undelivered: list[PermitHolder] = [
            granted[request_id] for request_id in self._state.undelivered
            if request_id in granted]
        self._state.undelivered = []
        # Grant signals under way, with their kind; referenced here because the event loop
        # holds tasks weakly.
        self._deliveries: dict[asyncio.Task[None], PermitKind] = {}
        self._reclaiming = False
        self._published_counts: tuple[int, int] | None = None
        self._reclaimer: asyncio.Task[None] | None = None
        self._paused = False  # for continue-as-new: nothing is granted any more in this run

    @workflow.run
    async def run(self, input: LaunchSemaphoreInput) -> None:
        # Kept referenced: the event loop holds tasks weakly. It is simply dropped at
        # continue-as-new, which never happens during a sweep.
        self._reclaimer = asyncio.create_task(self._reclaim_periodically())
        for kind in PERMIT_KINDS:  # what the last run freed while paused, or came with the start
            self._grant_free_permits(kind)
        while True:
            await workflow.wait_condition(
                lambda: self._counts_unpublished() or self._ready_to_continue_as_new()
            )
            if self._counts_unpublished():
                self._publish_counts()
            if self._ready_to_continue_as_new():
                self._state.undelivered = [h.request.request_id for h in self._undelivered]
                workflow.continue_as_new(
                    LaunchSemaphoreInput(settings=self._settings, state=self._state)
                )

    @workflow.signal(name=ACQUIRE_SIGNAL)
    def acquire(self, request: AcquireRequest) -> None:
        if request.request_id in self._known_request_ids:
            workflow.logger.info("ignoring duplicate acquire %s", request.request_id)
            return
        self._known_request_ids.add(request.request_id)
        self._state.pool(request.kind).waiters.append(request)
        self._grant_free_permits(request.kind)

    @workflow.signal(name=RELEASE_SIGNAL)
    def release(self, request: ReleaseRequest) -> None:
        self._finish(request.kind, [request.request_id], why="released")

    @workflow.signal(name=RELEASE_MANY_SIGNAL)
    def release_many(self, requests: list[ReleaseRequest]) -> None:
        """Many permits back at once (the bulk teardown's job slots)."""
        for kind in PERMIT_KINDS:
            ids = [r.request_id for r in requests if r.kind == kind]
            if ids:
                self._finish(kind, ids, why="released")

    @workflow.query(name=PERMITS_QUERY)
    def permits(self) -> SemaphoreView:
        return SemaphoreView(pools=[self._pool_view(kind) for kind in PERMIT_KINDS])

    def _pool_view(self, kind: PermitKind) -> PoolView:
        pool = self._state.pool(kind)
        return PoolView(
            kind=kind,
            limit=self._settings.limits.of(kind),
            held=len(pool.holders),
            waiting=len(pool.waiters),
            holders=pool.holders,
            waiters=pool.waiters,
        )

    def _grant_free_permits(self, kind: PermitKind) -> None:
        pool, limit = self._state.pool(kind), self._settings.limits.of(kind)
        while not self._grants_paused() and pool.waiters and len(pool.holders) < limit:
            holder = PermitHolder(request=pool.waiters.pop(0), granted_at=workflow.now())
            pool.holders.append(holder)
            self._undelivered.append(holder)
        self._send_grants()
        self._show()

    def _show(self) -> None:
        """The Web UI's current details: each pool's use and who is next in line."""
        lines = []
        labels: dict[PermitKind, str] = {"launch": "Launch permits", "job": "Job slots"}
        for kind, label in labels.items():
            pool = self._state.pool(kind)
            line = (f"**{label}:** {len(pool.holders)} of {self._settings.limits.of(kind)} "
                    f"held, {len(pool.waiters)} waiting")
            if pool.waiters:
                line += f"; next: {pool.waiters[0].holder_id}"
            lines.append(line)
        workflow.set_current_details("\n\n".join(lines))

    def _finish(self, kind: PermitKind, request_ids: list[str], *, why: str) -> None:
        """Frees the permits of ``request_ids``, or withdraws them from the queue, and
        remembers the ids so that a late duplicate acquire is not granted."""
        pool, ids = self._state.pool(kind), set(request_ids)
        held = [h for h in pool.holders if h.request.request_id not in ids]
        waiting = [w for w in pool.waiters if w.request_id not in ids]
        found = len(pool.holders) - len(held) + len(pool.waiters) - len(waiting)
        if len(ids) == 1:
            if found:
                workflow.logger.info("%s: %s permit of %s returned", why, kind, request_ids[0])
            else:
                workflow.logger.info("%s request %s is not held or waiting", why,
                                     request_ids[0])
        else:
            workflow.logger.info("%s: %d %s permits of %d requests returned", why, found,
                                 kind, len(ids))
        pool.holders, pool.waiters = held, waiting
        for request_id in request_ids:
            self._remember_finished(request_id)
        self._grant_free_permits(kind)

    def _remember_finished(self, request_id: str) -> None:
        finished = self._state.finished_request_ids
        if request_id in finished:
            return
        self._known_request_ids.add(request_id)
        finished.append(request_id)
        while len(finished) > FINISHED_REQUESTS_KEPT:
            self._known_request_ids.discard(finished.pop(0))

    def _send_grants(self) -> None:
        """Starts a grant signal for each new holder: launch permits first, then job
        slots (at most JOB_GRANTS_IN_FLIGHT at once), each kind in grant order, and
        nothing once a continue-as-new is due (the next run sends the rest). Signals go
        out in the same workflow task as the acquire or release that freed the permit,
        without waiting for earlier ones."""
        if not workflow.patched(LAUNCH_GRANTS_FIRST_PATCH):
            while self._undelivered and len(self._deliveries) < GRANTS_IN_FLIGHT:
                self._deliver(self._undelivered.pop(0))
            return
        while not self._grants_paused() and (holder := self._next_to_deliver()) is not None:
            self._undelivered.remove(holder)
            self._deliver(holder)

    def _next_to_deliver(self) -> PermitHolder | None:
        if len(self._deliveries) >= GRANTS_IN_FLIGHT:
            return None
        launch = next((h for h in self._undelivered if h.request.kind == "launch"), None)
        if launch is not None:
            return launch
        jobs_in_flight = sum(kind == "job" for kind in self._deliveries.values())
        if self._undelivered and jobs_in_flight < JOB_GRANTS_IN_FLIGHT:
            return self._undelivered[0]
        return None

    def _deliver(self, holder: PermitHolder) -> None:
        delivery = asyncio.create_task(self._signal_grant(holder))
        self._deliveries[delivery] = holder.request.kind
        delivery.add_done_callback(self._delivery_done)

    def _delivery_done(self, delivery: asyncio.Task[None]) -> None:
        self._deliveries.pop(delivery, None)
        self._send_grants()

    async def _signal_grant(self, holder: PermitHolder) -> None:
        request = holder.request
        try:
            await workflow.get_external_workflow_handle(request.holder_id).signal(
                GRANT_SIGNAL, PermitGrant(kind=request.kind, request_id=request.request_id)
            )
        except ApplicationError as err:
            # The server's only failure causes: the holder is closed or missing, or it has
            # hit its signal limit. Either way it will never learn of this permit.
            workflow.logger.info("grant to %s failed (%s)", request.holder_id, err.type)
            self._finish(request.kind, [request.request_id], why="holder gone")

    async def _reclaim_periodically(self) -> None:
        interval = self._settings.reclaim_interval
        while True:
            await workflow.wait_condition(
                lambda: self._has_holders() and not self._grants_paused())
            if self._state.next_reclaim_at is None:
                self._state.next_reclaim_at = workflow.now() + interval
            delay = self._state.next_reclaim_at - workflow.now()
            if delay > timedelta(0):
                await workflow.sleep(delay)
            self._state.next_reclaim_at = None
            await self._reclaim_closed_holders()

    async def _reclaim_closed_holders(self) -> None:
        held = [h.request for kind in self._swept_kinds()
                for h in self._state.pool(kind).holders]
        if not held:
            return
        self._reclaiming = True
        try:
            closed = await workflow.execute_activity(
                FIND_CLOSED_HOLDERS_ACTIVITY,
                held,
                result_type=list[str],
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1)),
                summary=f"reclaim: which of {len(held)} permit holders have closed",
            )
        finally:
            self._reclaiming = False
        closed_ids = set(closed)
        for request in held:
            if request.request_id in closed_ids:
                self._finish(request.kind, [request.request_id], why="holder closed")

    def _swept_kinds(self) -> list[PermitKind]:
        """Launch permits always; job slots only while a job waits for one."""
        return [kind for kind in PERMIT_KINDS
                if kind == "launch" or self._state.pool(kind).waiters]

    def _has_holders(self) -> bool:
        return bool(self._state.all_holders())

    def _launch_counts(self) -> tuple[int, int]:
        return len(self._state.launch.holders), len(self._state.launch.waiters)

    def _counts_unpublished(self) -> bool:
        return (
            self._settings.publish_search_attributes
            and self._published_counts != self._launch_counts()
        )

    def _publish_counts(self) -> None:
        holders, waiting = self._published_counts = self._launch_counts()
        workflow.upsert_search_attributes(
            [
                LAUNCH_HOLDERS_ATTRIBUTE.value_set(holders),
                LAUNCH_WAITING_ATTRIBUTE.value_set(waiting),
            ]
        )

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._settings.max_events_per_run
        )

    def _grants_paused(self) -> bool:
        """Whether this run grants no more: its continue-as-new is due (module docstring)."""
        if not self._paused and self._continue_as_new_due():
            self._paused = workflow.patched(PAUSE_FOR_CONTINUE_AS_NEW_PATCH)
        return self._paused

    def _ready_to_continue_as_new(self) -> bool:
        return (
            self._continue_as_new_due()
            and (not self._undelivered or workflow.patched(LAUNCH_GRANTS_FIRST_PATCH))
            and not self._deliveries
            and not self._reclaiming
            and workflow.all_handlers_finished()
        )
