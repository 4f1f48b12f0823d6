"""BulkTeardownWorkflow on the time-skipping test server, with FakeCloud's
``teardown_clusters`` and the real hand-over activity: batches per cloud region, failed
clusters tried again on durable timers and then given up, continue-as-new with clusters
queued, a refused cancel, the idle end, and a bug in a batch that holds the workflow task
(retried) instead of losing the batch's clusters; jobs to cancel in batches, with a
``cancel_jobs`` that answers the clusters as jobs would leave them (the real activity,
with real jobs: ``tests/workflows/test_managed_job.py``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.bulk_teardown import BulkTeardownActivities
from orch.bulk_teardown import (
    BULK_TEARDOWN_ID,
    CANCEL_JOBS_SIGNAL,
    HAND_OVER_SIGNAL,
    BulkTeardownInput,
    BulkTeardownState,
    CancelJobs,
    ClustersRequest,
    HandedOver,
    Pending,
)
from orch.clouds.base import InstanceStatus
from tests.workflows.fake_cloud import FakeCloud, provision_error
from tests.workflows.histories import save_with_children
from workflows.bulk_teardown import CANCEL_BATCH, CANCELS_AT_ONCE, BulkTeardownWorkflow
from workflows.managed_job_base import TEARDOWN_RETRY_WAITS


class Bed:
    def __init__(self, env: WorkflowEnvironment, cloud: FakeCloud) -> None:
        self.env, self.cloud = env, cloud
        self.queue = f"bulk-{uuid.uuid4().hex[:8]}"
        self.requests: list[ClustersRequest] = []
        # cancel_jobs: what each job leaves (by workflow id), the batches asked, and how
        # many of the first attempts fail.
        self.jobs: dict[str, HandedOver] = {}
        self.cancels: list[list[str]] = []
        self.cancel_failures = 0
        self.cancelling = self.most_cancelling = 0

    def make(self, region: str, count: int) -> list[HandedOver]:
        """``count`` clusters of two instances in ``region``, as handed over."""
        made = []
        for _ in range(count):
            name = f"job-{uuid.uuid4().hex[:8]}-0"
            self.cloud.instances[name] = {f"{name}-{i}": InstanceStatus.RUNNING
                                          for i in range(2)}
            made.append(HandedOver(owner=f"job/{name}", cluster_name=name, cloud_name=name,
                                   cloud="aws", region=region))
        return made

    async def hand_over(self, clusters: list[HandedOver],
                        input: BulkTeardownInput | None = None) -> WorkflowHandle:
        """The first by signal-with-start (what the hand-over activity does), the rest by
        signal (what a job does while the entity runs)."""
        handle = await self.env.client.start_workflow(
            BulkTeardownWorkflow.run, input or BulkTeardownInput(), id=BULK_TEARDOWN_ID,
            task_queue=self.queue, start_signal=HAND_OVER_SIGNAL,
            start_signal_args=[clusters[0]])
        for cluster in clusters[1:]:
            await handle.signal(HAND_OVER_SIGNAL, cluster)
        return handle

    def worker(self, **options: Any) -> Worker:
        base = [a for a in self.cloud.activities()
                if getattr(a, "__temporal_activity_definition").name == "teardown_clusters"]

        @activity.defn(name="teardown_clusters")
        async def teardown_clusters(request: ClustersRequest) -> object:
            self.requests.append(request)
            return await base[0](request)

        @activity.defn(name="cancel_jobs")
        async def cancel_jobs(request: CancelJobs) -> list[HandedOver]:
            self.cancelling += 1
            self.most_cancelling = max(self.most_cancelling, self.cancelling)
            try:
                await asyncio.sleep(0.05)  # the batches under way overlap
                self.cancels.append(request.job_ids)
                if self.cancel_failures:
                    self.cancel_failures -= 1
                    raise RuntimeError("the server is unavailable")
                return [self.jobs[j] for j in request.job_ids if j in self.jobs]
            finally:
                self.cancelling -= 1

        return Worker(self.env.client, task_queue=self.queue, workflows=[BulkTeardownWorkflow],
                      activities=[teardown_clusters, cancel_jobs,
                                  BulkTeardownActivities(self.env.client).hand_over_cluster],
                      **options)

    def left(self, clusters: list[HandedOver]) -> list[str]:
        return [c.cluster_name for c in clusters if self.cloud.instances[c.cloud_name]]


@pytest_asyncio.fixture
async def bed(time_skipping_env: WorkflowEnvironment) -> AsyncIterator[Bed]:
    yield Bed(time_skipping_env, FakeCloud())


async def result(handle: WorkflowHandle) -> BulkTeardownState:
    """The entity's state when it ends (idle for IDLE_END, skipped here)."""
    state: BulkTeardownState = await handle.result()
    return state


async def test_clusters_handed_over_together_go_in_one_batch_per_region(bed: Bed) -> None:
    east, west = bed.make("us-east-1", 7), bed.make("us-west-2", 3)
    handle = await bed.hand_over([*east, *west])  # all queued before a worker polls

    async with bed.worker():
        final = await result(handle)

    assert sorted((r.region, sorted(r.clusters)) for r in bed.requests) == [
        ("us-east-1", sorted(c.cloud_name for c in east)),
        ("us-west-2", sorted(c.cloud_name for c in west))]
    assert bed.left([*east, *west]) == []
    assert (final.terminated, final.pending, final.given_up) == (10, [], [])


async def test_a_failed_cluster_is_tried_again_after_each_wait_then_given_up(
    bed: Bed,
) -> None:
    (cluster,) = bed.make("us-east-1", 1)
    for _ in range(len(TEARDOWN_RETRY_WAITS) + 1):  # the first try and every retry fail
        bed.cloud.fail("teardown_clusters",
                       provision_error("TransientError", "RequestLimitExceeded", "region"))
    handle = await bed.hand_over([cluster])

    async with bed.worker():
        final = await result(handle)
        await save_with_children(bed.env.client, handle, "bulk_teardown")

    assert len(bed.requests) == len(TEARDOWN_RETRY_WAITS) + 1
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in (await handle.fetch_history()).events
              if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert timers[:3] == list(TEARDOWN_RETRY_WAITS)  # then the idle end's
    assert (final.terminated, final.given_up) == (0, [cluster.cluster_name])
    assert bed.left([cluster]) == [cluster.cluster_name]  # the warning says where


async def test_a_cluster_that_fails_once_is_terminated_on_its_retry(bed: Bed) -> None:
    clusters = bed.make("us-east-1", 2)
    bed.cloud.fail("teardown_clusters",
                   provision_error("TransientError", "RequestLimitExceeded", "region"))
    handle = await bed.hand_over(clusters)

    async with bed.worker():
        final = await result(handle)

    assert bed.left(clusters) == []
    assert (final.terminated, final.given_up) == (2, [])


async def test_clusters_queued_at_a_continue_as_new_are_carried_to_the_next_run(
    bed: Bed,
) -> None:
    clusters = bed.make("us-east-1", 120)  # 120 signals, more than a run's 100 events
    handle = await bed.hand_over(clusters, BulkTeardownInput(max_events_per_run=100))

    async with bed.worker():
        final = await result(handle)

    runs = {e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            for e in (await bed.env.client.get_workflow_handle(
                BULK_TEARDOWN_ID, run_id=handle.result_run_id).fetch_history()).events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW}
    assert runs, "the first run continued as new"
    assert bed.left(clusters) == []
    assert final.terminated == 120


async def test_a_cancel_from_the_web_ui_is_refused_and_the_clusters_still_go(
    bed: Bed,
) -> None:
    clusters = bed.make("us-east-1", 3)
    handle = await bed.hand_over(clusters)
    await handle.cancel()

    async with bed.worker():
        final = await result(handle)

    assert bed.left(clusters) == [] and final.terminated == 3


async def test_a_bug_in_a_batch_holds_the_workflow_task_until_fixed_and_loses_nothing(
    bed: Bed, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clusters = bed.make("us-east-1", 2)
    done = BulkTeardownWorkflow._done

    def broken(self: BulkTeardownWorkflow, item: Pending, error: str) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(BulkTeardownWorkflow, "_done", broken)
    handle = await bed.hand_over(clusters)
    # Outside the sandbox, which would import its own copy of the class patched here.
    async with bed.worker(workflow_runner=UnsandboxedWorkflowRunner()):
        for _ in range(200):  # the workflow task fails, and is retried: not the workflow
            events = (await handle.fetch_history()).events
            if any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in events):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no workflow task failed")
        monkeypatch.setattr(BulkTeardownWorkflow, "_done", done)  # a fixed worker

        final = await result(handle)

    assert bed.left(clusters) == [] and final.terminated == 2


async def test_jobs_to_cancel_go_in_batches_retried_until_done_and_their_clusters_go(
    bed: Bed,
) -> None:
    clusters = bed.make("us-east-1", 4) + bed.make("us-west-2", 2)
    bed.jobs = {c.owner: c for c in clusters}
    job_ids = [*bed.jobs, *(f"job/{i}" for i in range(2 * CANCEL_BATCH))]  # most left nothing
    bed.cancel_failures = 1
    handle = await bed.env.client.start_workflow(
        BulkTeardownWorkflow.run, BulkTeardownInput(), id=BULK_TEARDOWN_ID,
        task_queue=bed.queue, start_signal=CANCEL_JOBS_SIGNAL,
        start_signal_args=[CancelJobs(job_ids=job_ids)])

    async with bed.worker():
        final = await result(handle)

    batches = [job_ids[i:i + CANCEL_BATCH] for i in range(0, len(job_ids), CANCEL_BATCH)]
    assert len(batches) == 3
    # One batch asked twice: its first attempt failed, and the activity was retried.
    assert len(bed.cancels) == 4
    assert sorted(map(sorted, bed.cancels)) == sorted(map(sorted, [*bed.cancels[:1], *batches]))
    assert bed.most_cancelling <= CANCELS_AT_ONCE  # of the 3 batches
    assert bed.left(clusters) == []
    assert (final.terminated, final.pending, final.to_cancel) == (6, [], [])
