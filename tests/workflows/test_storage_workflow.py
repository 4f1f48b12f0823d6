"""The bucket entity (StorageWorkflow) on the time-skipping server with its real store
activities on the local store (buckets as directories under a throwaway ORCH_HOME): it
makes a bucket once, keeps it while anyone uses it, deletes a non-persistent one after its
last user once, never deletes one it did not make, refuses to delete one in use, and
turns a store's refusal into the attach's error."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.storage import PLAIN_STORAGE_ACTIVITIES
from orch.contracts.storage import (
    ATTACH_UPDATE,
    DELETE_UPDATE,
    DETACH_UPDATE,
    STORAGE_WORKFLOW,
    AttachRequest,
    DeleteRequest,
    DetachRequest,
    StorageInput,
    StorageRecord,
    StorageStatus,
    storage_workflow_id,
)
from orch.storage.base import BucketRef, StoreKind
from tests.workflows.histories import save_with_children
from workflows.storage import StorageWorkflow


class Buckets:
    """A worker for bucket entities on a queue of its own, and the local store's root."""

    def __init__(self, env: WorkflowEnvironment, queue: str, root: Path) -> None:
        self.env, self.queue, self.root = env, queue, root

    def bucket(self) -> BucketRef:
        return BucketRef(store=StoreKind.LOCAL, name=f"b-{uuid.uuid4().hex[:10]}")

    async def attach(self, bucket: BucketRef, user: str, persistent: bool = False
                     ) -> StorageRecord:
        """What ``prepare_bucket`` sends: update-with-start of the bucket's entity."""
        first = StorageRecord(bucket=bucket, persistent=persistent, users=[user],
                              created_by="alice@laptop")
        start: WithStartWorkflowOperation[StorageInput, StorageRecord] = (
            WithStartWorkflowOperation(
                STORAGE_WORKFLOW, StorageInput(record=first, publish_search_attributes=False),
                id=storage_workflow_id(bucket), task_queue=self.queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING))
        record: StorageRecord = await self.env.client.execute_update_with_start_workflow(
            ATTACH_UPDATE, AttachRequest(user=user, persistent=persistent),
            start_workflow_operation=start, result_type=StorageRecord)
        return record

    def handle(self, bucket: BucketRef) -> WorkflowHandle:
        return self.env.client.get_workflow_handle(storage_workflow_id(bucket))

    async def detach(self, bucket: BucketRef, user: str) -> StorageRecord:
        record: StorageRecord = await self.handle(bucket).execute_update(
            DETACH_UPDATE, DetachRequest(user=user), result_type=StorageRecord)
        return record

    def exists(self, bucket: BucketRef) -> bool:
        return (self.root / bucket.name).is_dir()


@pytest.fixture
async def buckets(time_skipping_env: WorkflowEnvironment, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Buckets]:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    queue = f"storage-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(time_skipping_env.client, task_queue=queue,
                          workflows=[StorageWorkflow], activities=PLAIN_STORAGE_ACTIVITIES,
                          activity_executor=executor, max_cached_workflows=0):
            yield Buckets(time_skipping_env, queue, tmp_path / "storage")


async def activities_completed(handle: WorkflowHandle, name: str) -> int:
    """How many times the activity ``name`` completed in the workflow's history."""
    events = [event async for event in handle.fetch_history_events()]
    scheduled = {event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
                 for event in events
                 if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    return sum(1 for event in events
               if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
               and scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]
               == name)


async def test_a_bucket_lives_while_used_and_goes_once_after_its_last_user(
    buckets: Buckets,
) -> None:
    bucket = buckets.bucket()
    first = await buckets.attach(bucket, "cluster/a")
    assert (first.status, first.managed, first.users) == (StorageStatus.READY, True, ["cluster/a"])
    assert buckets.exists(bucket)
    again = await buckets.attach(bucket, "job/7")
    assert again.users == ["cluster/a", "job/7"]

    kept = await buckets.detach(bucket, "cluster/a")
    assert (kept.status, kept.users) == (StorageStatus.READY, ["job/7"])
    assert buckets.exists(bucket)

    gone = await buckets.detach(bucket, "job/7")
    assert gone.status == StorageStatus.DELETED and not buckets.exists(bucket)
    handle = buckets.handle(bucket)
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert await activities_completed(handle, "create_bucket") == 1
    assert await activities_completed(handle, "delete_bucket") == 1
    await save_with_children(buckets.env.client, handle, "storage_lifecycle")

    anew = await buckets.attach(bucket, "cluster/b")  # the same name later: a new bucket
    assert anew.status == StorageStatus.READY and buckets.exists(bucket)
    await buckets.detach(bucket, "cluster/b")


async def test_a_bucket_that_was_there_before_is_never_deleted(buckets: Buckets) -> None:
    bucket = buckets.bucket()
    (buckets.root / bucket.name).mkdir(parents=True)
    (buckets.root / bucket.name / "theirs.txt").write_text("not orch's")

    record = await buckets.attach(bucket, "cluster/a")
    assert record.managed is False
    await buckets.detach(bucket, "cluster/a")

    assert (buckets.root / bucket.name / "theirs.txt").read_text() == "not orch's"
    assert await activities_completed(buckets.handle(bucket), "delete_bucket") == 0


async def test_a_persistent_bucket_stays_until_deleted_and_not_while_in_use(
    buckets: Buckets,
) -> None:
    bucket = buckets.bucket()
    await buckets.attach(bucket, "cluster/a", persistent=True)
    handle = buckets.handle(bucket)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(DELETE_UPDATE, DeleteRequest(), result_type=StorageRecord)
    assert isinstance(refused.value.cause, ApplicationError)
    assert "is used by cluster/a" in refused.value.cause.message

    await buckets.detach(bucket, "cluster/a")
    assert buckets.exists(bucket)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

    deleted = await handle.execute_update(DELETE_UPDATE, DeleteRequest(),
                                          result_type=StorageRecord)
    assert deleted.status == StorageStatus.DELETED and not buckets.exists(bucket)


async def test_a_store_refusal_fails_the_attach_and_leaves_nothing(buckets: Buckets) -> None:
    bucket = BucketRef(store=StoreKind.LOCAL, name="Not_A-Valid.NAME")
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await buckets.attach(bucket, "cluster/a", persistent=True)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "BadName"
    assert "local bucket name 'Not_A-Valid.NAME'" in cause.message
    result = StorageRecord.model_validate(await buckets.handle(bucket).result())
    assert result.users == [] and result.managed is None
