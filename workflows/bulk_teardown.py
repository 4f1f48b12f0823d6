"""BulkTeardownWorkflow (``orch-bulk-teardown``): terminates, in batches, the clusters that
cancelled managed jobs hand over (``orch.bulk_teardown``).

An entity workflow. Each hand-over is a signal (``HandedOver``); clusters queue in its
state. A cancel-all is a signal too (``CancelJobs``): the jobs queue in its state (before
``orch jobs cancel -a`` signals them, on the entity's behalf), and ``cancel_jobs``
activities, up to ``CANCELS_AT_ONCE`` for ``CANCEL_BATCH`` jobs each, read the clusters
they left in their results (signalling any job that has not ended after a grace period),
which queue as hand-overs do (``orch.bulk_teardown`` says why).

While clusters wait, it runs up to ``BATCHES_AT_ONCE`` ``teardown_clusters``
activities, each for up to ``BATCH`` clusters of one cloud region: the first clusters of
a cancel-all are torn down at once, and the next ones, arriving while they are, make the
next, larger batches. Once a batch is over, its clusters' job slots go back to the launch
semaphore in one signal: a slot is held until its cluster is gone.

A cluster whose teardown failed is tried again after each of the job teardown's waits
(``TEARDOWN_RETRY_WAITS``: 1, 5, 15 minutes), on a durable timer, then given up: logged
as a warning, kept in the state's ``given_up`` list (the Web UI shows the latest) and its
slot given back, as the job's own teardown does.

Continue-as-new when the server suggests it or after ``max_events_per_run`` events (each
hand-over is one): no new batch is started, and once none is in flight the queue is
carried to the next run. Idle for ``IDLE_END``, the workflow completes; the next
hand-over or cancel-all starts it again (signal-with-start). Its result is its state
(what it terminated, what it gave up on). Temporal's cancellation (the Web UI) is
refused: cancelling would abandon the clusters it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from orch.bulk_teardown import (
        BULK_TEARDOWN_WORKFLOW,
        CANCEL_JOBS_ACTIVITY,
        CANCEL_JOBS_SIGNAL,
        HAND_OVER_SIGNAL,
        TEARDOWN_CLUSTERS_ACTIVITY,
        BulkTeardownInput,
        BulkTeardownState,
        CancelJobs,
        ClusterOutcome,
        ClustersRequest,
        HandedOver,
        Pending,
    )
    from orch.semaphore import LAUNCH_SEMAPHORE_ID, RELEASE_MANY_SIGNAL, ReleaseRequest
    from workflows.managed_job_base import TEARDOWN_RETRY_WAITS
    from workflows.options import LONG_CALL, error_message

BATCH = 500  # clusters per activity: its input and result stay well under 100 KB
BATCHES_AT_ONCE = 4
IDLE_END = timedelta(minutes=10)
GIVEN_UP_KEPT = 100
# Jobs per cancel_jobs activity, and such activities at once: small batches, so that the
# clusters of the first jobs cancelled go to the teardown while the next are cancelled,
# and enough of them that a batch waiting for its slowest job idles few of the signals.
CANCEL_BATCH = 100
CANCELS_AT_ONCE = 4
# cancel_jobs is retried until it succeeds, whatever its error (the server's, or a bug
# fixed by a new worker): a batch dropped would leave the clusters its jobs left behind.
CANCEL_CALL = {**LONG_CALL, "retry_policy": RetryPolicy(maximum_interval=timedelta(minutes=1))}

Key = tuple[str, str, str]


def _key(cluster: HandedOver) -> Key:
    return cluster.cloud, cluster.region, cluster.cloud_name


@workflow.defn(name=BULK_TEARDOWN_WORKFLOW)
class BulkTeardownWorkflow:
    @workflow.init
    def __init__(self, input: BulkTeardownInput) -> None:
        self.state = input.state
        self.max_events = input.max_events_per_run
        self.known: set[Key] = {_key(p.cluster) for p in self.state.pending}
        # Teardown and cancel batches under way; referenced here because the event loop
        # holds tasks weakly.
        self.batches: set[asyncio.Task[None]] = set()
        self.cancelling: set[asyncio.Task[None]] = set()
        self.changed = False
        # An error a batch raised (a bug: its activity's failures are handled). Raised in
        # the run, it fails the workflow task, which Temporal retries until a fixed worker
        # replays it; left in the task, it would be logged and the batch's clusters lost.
        self.batch_error: BaseException | None = None

    @workflow.signal(name=HAND_OVER_SIGNAL)
    def hand_over(self, cluster: HandedOver) -> None:
        self._take(cluster)

    @workflow.signal(name=CANCEL_JOBS_SIGNAL)
    def cancel_jobs(self, request: CancelJobs) -> None:
        self.state.to_cancel.extend(request.job_ids)
        self.changed = True

    def _take(self, cluster: HandedOver) -> None:
        if _key(cluster) in self.known:
            return  # handed over twice (a retried hand-over activity)
        self.known.add(_key(cluster))
        self.state.pending.append(Pending(cluster=cluster))
        self.changed = True

    @workflow.run
    async def run(self, input: BulkTeardownInput) -> BulkTeardownState:
        """Runs until idle for IDLE_END; returns the state then (what it terminated and
        gave up on, for the Web UI's result)."""
        while True:
            self.changed = False
            if self.batch_error is not None:
                raise RuntimeError(f"a teardown batch failed: {self.batch_error!r}"
                                   ) from self.batch_error
            if not self._continue_as_new_due():
                self._start_batches()
            elif not self._busy():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(BulkTeardownInput(state=self.state,
                                                           max_events_per_run=self.max_events))
            self._show()
            if not self._busy() and not self._queued():
                await self._wait(self._queued, IDLE_END)
                if not self._queued():  # (a hand-over after this: the server refuses
                    return self.state   # the completion, and the task runs again)
                continue
            await self._wait(lambda: self.changed, self._until_next_retry())

    async def _wait(self, condition: Callable[[], bool], timeout: timedelta | None) -> None:
        """Until ``condition`` holds, or ``timeout`` passed. A cancel is refused."""
        try:
            await workflow.wait_condition(condition, timeout=timeout)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            workflow.logger.warning("cancel refused: the bulk teardown finishes the clusters "
                                    "it holds (terminate it to stop; they may then remain)")

    def _busy(self) -> bool:
        return bool(self.batches or self.cancelling)

    def _queued(self) -> bool:
        return bool(self.state.pending or self.state.to_cancel)

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        return (info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= self.max_events)

    def _until_next_retry(self) -> timedelta | None:
        """How long until the next failed cluster is due to be tried again, if any."""
        now = workflow.now()
        due = [p.retry_at for p in self.state.pending if p.retry_at is not None
               and p.retry_at > now]
        return min(due) - now if due else None

    def _ready(self) -> list[Pending]:
        now = workflow.now()
        return [p for p in self.state.pending if p.retry_at is None or p.retry_at <= now]

    def _start_batches(self) -> None:
        """Batches of jobs to cancel while fewer than CANCELS_AT_ONCE run; batches of ready
        clusters, one cloud region each, while fewer than BATCHES_AT_ONCE run."""
        state = self.state
        while len(self.cancelling) < CANCELS_AT_ONCE and state.to_cancel:
            jobs, state.to_cancel = state.to_cancel[:CANCEL_BATCH], state.to_cancel[CANCEL_BATCH:]
            self._track(self.cancelling, self._run_cancel(jobs))
        while len(self.batches) < BATCHES_AT_ONCE and (ready := self._ready()):
            place = (ready[0].cluster.cloud, ready[0].cluster.region)
            batch = [p for p in ready if (p.cluster.cloud, p.cluster.region) == place][:BATCH]
            taken = {id(p) for p in batch}
            state.pending = [p for p in state.pending if id(p) not in taken]
            self._track(self.batches, self._run_batch(batch))

    def _track(self, group: set[asyncio.Task[None]], work: Coroutine[None, None, None]) -> None:
        task = asyncio.create_task(work)
        group.add(task)
        task.add_done_callback(lambda done: self._batch_done(group, done))

    def _batch_done(self, group: set[asyncio.Task[None]], task: asyncio.Task[None]) -> None:
        group.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.batch_error = task.exception()
        self.changed = True

    async def _run_cancel(self, job_ids: list[str]) -> None:
        """Cancel the jobs; queue the clusters they left in their results."""
        left = await workflow.execute_activity(
            CANCEL_JOBS_ACTIVITY, CancelJobs(job_ids=job_ids), result_type=list[HandedOver],
            **CANCEL_CALL, summary=f"cancel {len(job_ids)} managed job(s)")
        for cluster in left:
            self._take(cluster)

    async def _run_batch(self, batch: list[Pending]) -> None:
        cloud, region = batch[0].cluster.cloud, batch[0].cluster.region
        names = [p.cluster.cloud_name for p in batch]
        try:
            outcomes = await workflow.execute_activity(
                TEARDOWN_CLUSTERS_ACTIVITY, ClustersRequest(cloud=cloud, region=region,
                                                            clusters=names),
                result_type=list[ClusterOutcome], **LONG_CALL,
                summary=f"terminate {len(names)} cluster(s) in {cloud} {region}")
        except ActivityError as err:
            outcomes = [ClusterOutcome(cluster=n, error=error_message(err)) for n in names]
        by_name = {o.cluster: o for o in outcomes}
        slots: list[ReleaseRequest] = []
        for item in batch:
            outcome = by_name.get(item.cluster.cloud_name)
            error = outcome.error if outcome is not None else "no outcome reported"
            if error and item.tries < len(TEARDOWN_RETRY_WAITS):
                item.retry_at = workflow.now() + TEARDOWN_RETRY_WAITS[item.tries]
                item.tries, item.last_error = item.tries + 1, error
                self.state.pending.append(item)
                workflow.logger.warning("teardown of %s failed: %s; trying again at %s",
                                        item.cluster.cluster_name, error, item.retry_at)
                continue
            self._done(item, error)
            if item.cluster.slot is not None:
                slots.append(item.cluster.slot)
        await self._release(slots)

    def _done(self, item: Pending, error: str) -> None:
        cluster = item.cluster
        self.known.discard(_key(cluster))
        if not error:
            self.state.terminated += 1
            return
        workflow.logger.warning(
            "teardown of %s (of %s) given up: %s; instances tagged orch-cluster=%s may "
            "remain on %s/%s", cluster.cluster_name, cluster.owner, error, cluster.cloud_name,
            cluster.cloud, cluster.region)
        self.state.given_up = [*self.state.given_up, cluster.cluster_name][-GIVEN_UP_KEPT:]

    async def _release(self, slots: list[ReleaseRequest]) -> None:
        """The batch's job slots back to the launch semaphore, in one signal."""
        if not slots:
            return
        try:
            await workflow.get_external_workflow_handle(LAUNCH_SEMAPHORE_ID).signal(
                RELEASE_MANY_SIGNAL, slots)
        except ApplicationError as err:  # no semaphore: nothing held there any more
            workflow.logger.info("%d job slot(s) not released: %s", len(slots), err.type)

    def _show(self) -> None:
        """The Web UI's current details."""
        state = self.state
        waiting = [p for p in state.pending if p.retry_at is not None]
        lines = [f"**Tearing down:** {len(state.pending) - len(waiting)} cluster(s) queued, "
                 f"{len(self.batches)} batch(es) under way, {len(waiting)} waiting to be "
                 f"tried again; {state.terminated} terminated so far"]
        if state.to_cancel or self.cancelling:
            lines.append(f"**Cancelling:** {len(state.to_cancel)} job(s) queued, "
                         f"{len(self.cancelling)} batch(es) under way")
        if state.given_up:
            lines.append(f"**Given up (instances may remain):** {', '.join(state.given_up)}")
        workflow.set_current_details("\n\n".join(lines))
