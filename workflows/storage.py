"""StorageWorkflow ``storage/<store>/<name>``: the entity of one bucket orch creates.

Its state is a :class:`StorageRecord`; its users are the workflow ids of the clusters and
managed jobs using the bucket. Everything that happens to the bucket happens here, in one
history, so that creation and deletion never race:

* ``attach`` (an Update, sent with update-with-start by a launch's ``prepare_bucket``
  activity) adds a user and returns once the bucket exists. The first one looks whether
  the bucket is there (``bucket_exists``) and records the answer before it creates
  anything: a bucket that was there before orch recorded it is never deleted by orch
  (SkyPilot's rule for buckets it did not create), one orch made is, when the time comes.
* ``detach`` (from a teardown, or a managed job that ended) removes a user. When none is
  left and the bucket does not persist, the entity deletes it (``delete_bucket``, retried
  until done, on whatever worker is alive) and completes; the ``detach`` returns once it
  has, so a teardown reports the bucket gone. A retried delete finds nothing and says so:
  the bucket is deleted once, and a new bucket of the same name is a new entity.
* ``delete`` (``orch storage delete``) deletes a bucket nobody uses, persistent or not.

An ``attach`` that arrives while the bucket is being deleted is refused (``StorageBusy``):
the launch retries it, and starts a new entity once this one has completed. The record's
fields that ``orch storage ls`` shows are search attributes, so the list is one
visibility query.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from orch.contracts.storage import (
        ATTACH_UPDATE,
        BUCKET_EXISTS,
        CREATE_BUCKET,
        DELETE_BUCKET,
        DELETE_UPDATE,
        DETACH_UPDATE,
        RECORD_QUERY,
        STORAGE_WORKFLOW,
        AttachRequest,
        DeleteRequest,
        DetachRequest,
        StorageInput,
        StorageRecord,
        StorageStatus,
    )
    from orch.records import (
        SA_REGION,
        SA_STORAGE_PERSISTENT,
        SA_STORAGE_STATUS,
        SA_STORAGE_USERS,
        SA_USER,
    )
    from workflows.options import HEARTBEAT, NOT_RETRYABLE, error_message, error_type

# What a store raises that another try cannot fix (orch.storage.errors).
STORAGE_NOT_RETRYABLE = [*NOT_RETRYABLE, "NoSuchBucket", "AccessDenied", "NameTaken", "BadName"]


def storage_call(limit: timedelta, every_at_most: timedelta, attempts: int = 0,
                 not_retryable: list[str] | None = None) -> dict[str, Any]:
    """Options of a storage activity: it heartbeats (a dead worker is noticed within
    HEARTBEAT), and is retried with backoff up to ``every_at_most`` apart, ``attempts``
    times (0: until it succeeds), except for ``not_retryable`` errors."""
    return {"start_to_close_timeout": limit, "heartbeat_timeout": HEARTBEAT,
            "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=2),
                                        backoff_coefficient=2.0, maximum_interval=every_at_most,
                                        maximum_attempts=attempts,
                                        non_retryable_error_types=not_retryable)}


STORE_CALL = storage_call(timedelta(minutes=10), timedelta(seconds=60), 6, STORAGE_NOT_RETRYABLE)
# A deletion is never given up for a passing fault: a bucket left behind costs money.
DELETE_CALL = storage_call(timedelta(hours=6), timedelta(minutes=5),
                           not_retryable=STORAGE_NOT_RETRYABLE)
# A create refused for these made nothing; after any other failure the bucket may exist.
REFUSED_NAMES = ("NameTaken", "BadName", "AccessDenied")
BUSY = "StorageBusy"  # an attach while the bucket is being deleted: try again
IN_USE = "StorageInUse"


@workflow.defn(name=STORAGE_WORKFLOW)
class StorageWorkflow:
    @workflow.init
    def __init__(self, request: StorageInput) -> None:
        self.state = request.record
        self.publish = request.publish_search_attributes
        self.making = asyncio.Lock()  # one creation at a time
        self.deleted = False

    @workflow.query(name=RECORD_QUERY)
    def record(self) -> StorageRecord:
        return self.state

    # -- users ---------------------------------------------------------------------------
    @workflow.update(name=ATTACH_UPDATE)
    async def attach(self, request: AttachRequest) -> StorageRecord:
        state = self.state
        if request.user not in state.users:
            state.users.append(request.user)
        state.persistent = state.persistent or request.persistent  # kept if anyone asks
        state.created_by = state.created_by or request.created_by
        state.source = state.source or request.source
        self._publish()
        try:
            await self._made()
        except ApplicationError:
            if state.status == StorageStatus.INIT and request.user in state.users:
                state.users.remove(request.user)  # it never used the bucket
                self._publish()
            raise
        return state

    @attach.validator
    def _validate_attach(self, request: AttachRequest) -> None:
        if self.state.status in (StorageStatus.DELETING, StorageStatus.DELETED):
            raise ApplicationError(f"bucket {self.state.bucket.name} is being deleted; its "
                                   "next user makes a new one", type=BUSY)

    @workflow.update(name=DETACH_UPDATE)
    async def detach(self, request: DetachRequest) -> StorageRecord:
        """Remove a user; returns once a bucket nobody keeps is deleted."""
        if request.user in self.state.users:
            self.state.users.remove(request.user)
            self._publish()
        if self._doomed():
            await workflow.wait_condition(lambda: self.deleted or bool(self.state.failure))
        return self.state

    @workflow.update(name=DELETE_UPDATE)
    async def delete(self, request: DeleteRequest) -> StorageRecord:
        """Delete the bucket now (``orch storage delete``); returns once it is gone."""
        self.state.delete_requested = True
        self.state.failure = ""
        await workflow.wait_condition(lambda: self.deleted or bool(self.state.failure))
        if not self.deleted:
            self.state.delete_requested = False
            raise ApplicationError(self.state.failure, type="StorageDeleteFailed",
                                   non_retryable=True)
        return self.state

    @delete.validator
    def _validate_delete(self, request: DeleteRequest) -> None:
        if self.state.users:
            raise ApplicationError(
                f"bucket {self.state.bucket.name} is used by {', '.join(self.state.users)}: "
                "tear those down first (orch down, orch jobs cancel)", type=IN_USE)

    # -- the entity's life -----------------------------------------------------------------
    @workflow.run
    async def run(self, request: StorageInput) -> StorageRecord:
        self.state.created_at = self.state.created_at or workflow.now()
        self._publish()
        while True:
            await workflow.wait_condition(lambda: self._doomed() or self._may_continue())
            if not self._doomed():
                workflow.continue_as_new(StorageInput(record=self.state,
                                                      publish_search_attributes=self.publish))
            if await self._delete():
                self.deleted = True
                self.state.status = StorageStatus.DELETED
                self._publish()
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self.state

    def _doomed(self) -> bool:
        """Nobody uses the bucket and nobody keeps it (or it was never made): it goes,
        unless deleting failed for good, which only ``orch storage delete`` retries."""
        state = self.state
        return (not state.users and not self.making.locked() and not state.failure
                and (state.delete_requested or not state.persistent
                     or state.status == StorageStatus.INIT))

    def _may_continue(self) -> bool:
        return (workflow.info().is_continue_as_new_suggested() and not self.making.locked()
                and workflow.all_handlers_finished())

    async def _made(self) -> None:
        """Make the bucket once: look first and record what was found, then create."""
        async with self.making:
            state = self.state
            if state.status != StorageStatus.INIT:
                return
            try:
                if state.managed is None:
                    exists = await workflow.execute_activity(
                        BUCKET_EXISTS, state.bucket, result_type=bool, **STORE_CALL,
                        summary=f"does {state.bucket.uri} exist?")
                    state.managed = not exists
                if state.managed:
                    await workflow.execute_activity(
                        CREATE_BUCKET, state.bucket, result_type=bool, **STORE_CALL,
                        summary=f"create {state.bucket.uri}")
            except ActivityError as err:
                if error_type(err) in REFUSED_NAMES:
                    state.managed = None  # the name is not ours: nothing was made
                raise ApplicationError(error_message(err), type=error_type(err) or
                                       "StorageError", non_retryable=True) from err
            state.status = StorageStatus.READY
            self._publish()

    async def _delete(self) -> bool:
        """Delete the bucket if orch made it; False when that failed for good."""
        state = self.state
        state.status = StorageStatus.DELETING
        self._publish()
        if not state.managed:
            return True  # never made by orch (or never made at all): nothing to remove
        try:
            await workflow.execute_activity(DELETE_BUCKET, state.bucket, result_type=bool,
                                            **DELETE_CALL, summary=f"delete {state.bucket.uri}")
        except ActivityError as err:
            state.failure = f"deleting bucket {state.bucket.name} failed: {error_message(err)}"
            state.status = StorageStatus.READY
            self._publish()
            return False
        return True

    def _publish(self) -> None:
        state = self.state
        workflow.set_current_details(
            f"**{state.status}** bucket {state.bucket.uri}, "
            f"{'persistent' if state.persistent else 'deleted when unused'}; used by "
            f"{', '.join(state.users) or 'nobody'}"
            + (f"\n\n**Failure:** {state.failure}" if state.failure else ""))
        if not self.publish:
            return  # the time-skipping test server has no custom search attributes
        workflow.upsert_search_attributes([
            SearchAttributeKey.for_keyword(SA_REGION).value_set(state.bucket.region or ""),
            SearchAttributeKey.for_keyword(SA_USER).value_set(state.created_by),
            SearchAttributeKey.for_keyword_list(SA_STORAGE_USERS).value_set(list(state.users)),
            SearchAttributeKey.for_bool(SA_STORAGE_PERSISTENT).value_set(state.persistent),
            SearchAttributeKey.for_keyword_list(SA_STORAGE_STATUS).value_set([state.status]),
        ])
