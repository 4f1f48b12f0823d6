"""Storage's contract: the bucket entity workflow's name, Updates and record, and the
storage activities' names and records (``activities/storage.py`` implements them;
``workflows/storage.py`` and the launch and teardown steps call them by these names).

A bucket orch creates has an entity workflow, ``storage/<store>/<name>``
(:func:`storage_workflow_id`), whose state is a :class:`StorageRecord`: who made it, where,
whether it persists, and its users — the workflow ids of the clusters (``cluster/<name>``)
and managed jobs (``job/<id>``) that use it. A bucket given by URI has none: orch neither
creates nor deletes it. Nothing here holds a credential.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from orch.clouds.base import ClusterInfo
from orch.spec_storage import CLOUD_STORES, StorageMode, StorageMount
from orch.storage.base import BucketRef, StoreKind

STORAGE_WORKFLOW = "StorageWorkflow"
ATTACH_UPDATE = "attach"
DETACH_UPDATE = "detach"
DELETE_UPDATE = "delete"
RECORD_QUERY = "record"

BUCKET_EXISTS = "bucket_exists"
CREATE_BUCKET = "create_bucket"
PREPARE_BUCKET = "prepare_bucket"  # attach a user to the bucket's entity, which makes it
UPLOAD_TO_BUCKET = "upload_to_bucket"
RELEASE_BUCKET = "release_bucket"  # detach a user; the entity deletes what nobody keeps
DELETE_BUCKET = "delete_bucket"
MOUNT_BUCKETS = "mount_buckets"  # COPY, MOUNT and MOUNT_CACHED on every node
UNMOUNT_BUCKETS = "unmount_buckets"

# MOUNT_CACHED's local cache on each node, at most this big (rclone evicts beyond it).
CACHE_LIMIT = "10G"


def storage_workflow_id(bucket: BucketRef) -> str:
    """``storage/<store>/<name>`` (Azure: ``storage/azure/<account>/<name>``, a container's
    name being unique within its account only)."""
    account = f"{bucket.account}/" if bucket.store == StoreKind.AZURE and bucket.account else ""
    return f"storage/{bucket.store}/{account}{bucket.name}"


class StorageStatus(StrEnum):
    INIT = "INIT"  # recorded; the bucket may not exist yet
    READY = "READY"  # made (or found), in use or kept
    DELETING = "DELETING"  # nobody uses it and it does not persist: being deleted
    DELETED = "DELETED"  # the entity's last word


class StorageRecord(BaseModel):
    """One bucket orch created (or was asked to create): the entity workflow's state."""

    bucket: BucketRef
    created_by: str = ""  # user@host of the launch that first asked for it
    created_at: datetime | None = None
    persistent: bool = True
    # Whether orch made the bucket, which it then may delete: None until the entity has
    # looked, False for a bucket that existed before it (never deleted).
    managed: bool | None = None
    users: list[str] = Field(default_factory=list)  # cluster/<name>, job/<id>
    status: StorageStatus = StorageStatus.INIT
    source: str = ""  # what was uploaded into it, as the task wrote it
    delete_requested: bool = False  # `orch storage delete` asked for it
    failure: str = ""  # why the last creation or deletion failed for good


class StorageInput(BaseModel):
    record: StorageRecord
    publish_search_attributes: bool = True


class AttachRequest(BaseModel):
    """``user`` uses the bucket from now on (idempotent); creates the record if new."""

    user: str
    persistent: bool = True
    created_by: str = ""
    source: str = ""


class DetachRequest(BaseModel):
    user: str


class DeleteRequest(BaseModel):
    """`orch storage delete`: delete now, if no cluster or job uses it."""


class BucketMount(BaseModel):
    """One bucket on a cluster's nodes: where, how, and whether orch keeps a record of it
    (a bucket it names and creates; a URI's bucket is only used)."""

    path: str
    mode: StorageMode
    bucket: BucketRef
    recorded: bool
    persistent: bool = True
    sources: list[str] = Field(default_factory=list)  # local paths uploaded into it

    @property
    def workflow_id(self) -> str:
        return storage_workflow_id(self.bucket)


def resolve_mounts(mounts: dict[str, StorageMount], cloud: str, region: str,
                   pins: list[BucketRef]) -> list[BucketMount]:
    """The task's bucket entries, each on its store: the one given or its URI's, the one
    ``pins`` already chose for that name (a managed job recovering elsewhere keeps its
    checkpoint bucket), else the store of ``cloud`` — made in ``region`` when new."""
    pinned = {pin.name: pin for pin in pins}
    resolved = []
    for path, mount in mounts.items():
        uri = mount.bucket_uri
        if uri is not None:
            resolved.append(BucketMount(path=path, mode=mount.mode, bucket=uri,
                                        recorded=False, persistent=True))
            continue
        assert mount.name is not None
        pin = pinned.get(mount.name)
        store = mount.store or (pin.store if pin else CLOUD_STORES.get(cloud, StoreKind.LOCAL))
        if pin is not None and pin.store == store:
            bucket = pin
        else:
            own = store == CLOUD_STORES.get(cloud) and store != StoreKind.LOCAL
            bucket = BucketRef(store=store, name=mount.name, region=region if own else None)
        resolved.append(BucketMount(path=path, mode=mount.mode, bucket=bucket, recorded=True,
                                    persistent=mount.persistent, sources=mount.local_sources))
    return resolved


class PrepareRequest(BaseModel):
    """Record ``users`` on the bucket's entity (starting it if new), then make the bucket
    unless it existed before orch recorded it."""

    mount: BucketMount
    users: list[str]
    created_by: str = ""


class UploadRequest(BaseModel):
    bucket: BucketRef
    sources: list[str]
    report_to: str | None = None  # the workflow told how the upload goes (orch launch)


class ReleaseRequest(BaseModel):
    """``user`` no longer uses ``buckets``: each one's entity deletes it once nobody does
    and it does not persist; the result says which went."""

    user: str
    buckets: list[BucketRef]


class MountRequest(BaseModel):
    info: ClusterInfo
    mounts: list[BucketMount]
    report_to: str | None = None  # the workflow told how COPY goes (orch launch)


class UnmountRequest(BaseModel):
    info: ClusterInfo
    mounts: list[BucketMount]
