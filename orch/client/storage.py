"""Buckets orch created, from the client: ``orch storage ls`` and ``orch storage delete``.

    async with await Client.connect() as client:
        for bucket in await Storage(client).ls():
            print(bucket.name, bucket.store, bucket.users)

Each bucket orch creates has an entity workflow (``storage/<store>/<name>``, see
``orch.contracts.storage``); `ls` is one visibility query over their search attributes
(visibility lags its workflows by a moment). `delete` is the entity's ``delete`` Update:
it deletes a bucket nobody uses (persistent or not) and returns once it is gone, and is
refused, naming the users, while a cluster or managed job uses it. Buckets given by URI,
or that existed before orch looked, are never deleted by orch: the first have no entity,
the second's entity forgets them without deleting.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from orch.client import Client, OrchError
from orch.client.following import update_failure
from orch.contracts.storage import (
    DELETE_UPDATE,
    STORAGE_WORKFLOW,
    DeleteRequest,
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
from orch.storage.base import StoreKind

NO_SUCH_STORAGE = "NoSuchStorage"


class StorageSummary(BaseModel):
    """One row of ``orch storage ls``."""

    name: str
    store: StoreKind
    workflow_id: str
    region: str = ""
    created_by: str = ""
    created_at: datetime | None = None
    persistent: bool = True
    users: list[str] = []
    status: str = ""


def _from_id(workflow_id: str) -> tuple[StoreKind, str] | None:
    """``storage/<store>/[<account>/]<name>`` → (store, name)."""
    parts = workflow_id.split("/")
    if len(parts) < 3 or parts[0] != "storage" or parts[1] not in set(StoreKind):
        return None
    return StoreKind(parts[1]), parts[-1]


class Storage:
    def __init__(self, client: Client) -> None:
        self.temporal = client.temporal

    async def ls(self) -> list[StorageSummary]:
        """Every bucket orch keeps a record of, by name."""
        query = f"WorkflowType = '{STORAGE_WORKFLOW}' AND ExecutionStatus = 'Running'"
        found = []
        async for execution in self.temporal.list_workflows(query):
            kind_and_name = _from_id(execution.id)
            if kind_and_name is None:
                continue
            attrs = execution.typed_search_attributes
            status = attrs.get(SearchAttributeKey.for_keyword_list(SA_STORAGE_STATUS)) or []
            persistent = attrs.get(SearchAttributeKey.for_bool(SA_STORAGE_PERSISTENT))
            found.append(StorageSummary(
                name=kind_and_name[1], store=kind_and_name[0], workflow_id=execution.id,
                region=attrs.get(SearchAttributeKey.for_keyword(SA_REGION)) or "",
                created_by=attrs.get(SearchAttributeKey.for_keyword(SA_USER)) or "",
                created_at=execution.start_time,
                persistent=True if persistent is None else persistent,
                users=list(attrs.get(SearchAttributeKey.for_keyword_list(SA_STORAGE_USERS))
                           or []),
                status=status[0] if status else StorageStatus.INIT))
        return sorted(found, key=lambda s: (s.name, s.store))

    async def delete(self, bucket: StorageSummary) -> StorageRecord:
        """Delete a bucket no cluster or job uses; returns its last record."""
        handle = self.temporal.get_workflow_handle(bucket.workflow_id)
        try:
            record: StorageRecord = await handle.execute_update(
                DELETE_UPDATE, DeleteRequest(), result_type=StorageRecord)
        except WorkflowUpdateFailedError as err:
            raise update_failure(err) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise OrchError(f"bucket {bucket.name} is already gone", NO_SUCH_STORAGE
                                ) from None
            raise
        return record
