"""The storage steps of a launch, a teardown and a managed job's end, for their workflows
to call (deterministic: activities by name, records from ``orch.contracts.storage``).

A launch resolves the task's buckets once it knows where its nodes are (a bucket that
names no store lives on the cluster's cloud's), tells its parent about them *before*
attaching them (so that whatever happens next, the cluster's or job's teardown knows to
release them), attaches the cluster (and its managed job) to each bucket orch records —
the bucket's entity makes it — and uploads the task's local sources; all before runtime
setup. Once Ray runs and the files are synced, the buckets are mounted (or copied) on the
nodes. A stop or terminate unmounts them first (best effort: nodes may be gone); a
terminate releases them last, once the instances are gone.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import ClusterInfo
    from orch.contracts.storage import (
        MOUNT_BUCKETS,
        PREPARE_BUCKET,
        RELEASE_BUCKET,
        UNMOUNT_BUCKETS,
        UPLOAD_TO_BUCKET,
        BucketMount,
        MountRequest,
        PrepareRequest,
        ReleaseRequest,
        StorageRecord,
        UnmountRequest,
        UploadRequest,
        resolve_mounts,
        storage_workflow_id,
    )
    from orch.records import LaunchInput, Placement, cluster_workflow_id
    from orch.spec import Task
    from orch.storage.base import BucketRef, UploadReport
    from orch.summaries import on_nodes
    from workflows.options import LONG_CALL, error_message
    from workflows.storage import STORAGE_NOT_RETRYABLE, storage_call

# Attaching waits for the bucket's entity: for its creation, or for an earlier deletion
# of the same name to finish (StorageBusy, retried).
ATTACH_CALL = storage_call(timedelta(hours=1), timedelta(seconds=30), 20, STORAGE_NOT_RETRYABLE)
# Unmounting waits for a cached mount's write-back (2 min at most on the node); best effort.
UNMOUNT_CALL = storage_call(timedelta(minutes=5), timedelta(seconds=5), 2)
# Releasing waits for the deletion of a bucket nobody keeps: never given up on.
RELEASE_CALL = storage_call(timedelta(hours=6), timedelta(minutes=5))


def buckets_of(mounts: list[BucketMount]) -> list[BucketRef]:
    """The recorded buckets among ``mounts``, each once."""
    seen: dict[str, BucketRef] = {}
    for mount in mounts:
        if mount.recorded:
            seen.setdefault(mount.workflow_id, mount.bucket)
    return list(seen.values())


def added_buckets(known: list[BucketRef], mounts: list[BucketMount]) -> list[BucketRef]:
    """``known`` and the recorded buckets of ``mounts`` it lacks."""
    ids = {storage_workflow_id(bucket) for bucket in known}
    return known + [b for b in buckets_of(mounts) if storage_workflow_id(b) not in ids]


def merged(known: list[BucketMount], new: list[BucketMount]) -> list[BucketMount]:
    """``known`` and ``new``, each mount of a bucket at a path once (a bucket a later
    launch mounts elsewhere, or replaces, stays known: its release is still due)."""
    def key(mount: BucketMount) -> tuple[str, str]:
        return mount.path, mount.bucket.uri

    fresh = {key(mount) for mount in new}
    return [mount for mount in known if key(mount) not in fresh] + new


def storage_users(request: LaunchInput) -> list[str]:
    """Who uses a launch's buckets: its cluster, and the managed job it launches for."""
    return [cluster_workflow_id(request.cluster_name)] + (
        [request.storage_owner] if request.storage_owner else [])


def resolved(request: LaunchInput, placement: Placement) -> list[BucketMount]:
    return resolve_mounts(request.task.storage_mounts, placement.cloud, placement.region,
                          request.storage_pins)


async def prepare(request: LaunchInput, mounts: list[BucketMount], report_to: str | None
                  ) -> list[BucketMount]:
    """Attach the users to each recorded bucket (its entity makes it) and upload the
    task's local sources into it; the mounts, with each bucket as its record has it."""
    prepared = []
    for mount in mounts:
        if mount.recorded:
            record = await workflow.execute_activity(
                PREPARE_BUCKET, PrepareRequest(mount=mount, users=storage_users(request),
                                               created_by=request.requested_by),
                result_type=StorageRecord, **ATTACH_CALL,
                summary=f"attach {request.cluster_name} to bucket {mount.bucket.uri}")
            mount = mount.model_copy(update={"bucket": record.bucket})
        if mount.sources:
            await workflow.execute_activity(
                UPLOAD_TO_BUCKET, UploadRequest(bucket=mount.bucket, sources=mount.sources,
                                                report_to=report_to),
                result_type=UploadReport, **LONG_CALL,
                summary=f"upload {', '.join(mount.sources)} to {mount.bucket.uri}")
        prepared.append(mount)
    return prepared


async def mount(info: ClusterInfo, mounts: list[BucketMount], report_to: str | None) -> None:
    await workflow.execute_activity(
        MOUNT_BUCKETS, MountRequest(info=info, mounts=mounts, report_to=report_to),
        **LONG_CALL, summary=on_nodes(f"attach {len(mounts)} bucket(s) (rclone)", info))


async def unmount(info: ClusterInfo | None, mounts: list[BucketMount]) -> list[str]:
    """Unmount the buckets on the nodes that answer; what could not be done."""
    if info is None or not info.nodes or not mounts:
        return []
    try:
        warnings: list[str] = await workflow.execute_activity(
            UNMOUNT_BUCKETS, UnmountRequest(info=info, mounts=mounts), result_type=list[str],
            **UNMOUNT_CALL, summary=on_nodes("unmount the buckets (best effort)", info))
    except ActivityError as err:
        return [f"buckets not unmounted: {error_message(err)}"]
    return warnings


async def release(user: str, buckets: list[BucketRef]) -> list[str]:
    """Detach ``user`` from each bucket; each bucket's entity deletes what nobody keeps.
    Returns what became of them (deleted, or kept after a failure)."""
    if not buckets:
        return []
    said: list[str] = await workflow.execute_activity(
        RELEASE_BUCKET, ReleaseRequest(user=user, buckets=buckets), result_type=list[str],
        **RELEASE_CALL, summary=f"release {len(buckets)} bucket(s) of {user}")
    return said


def with_buckets_of(launched: Task | None, task: Task) -> Task:
    """The cluster's launched shape, with ``task``'s buckets added (what a start mounts)."""
    base = launched or Task(num_nodes=task.num_nodes, resources=task.resources)
    return base.model_copy(update={"storage_mounts": {**base.storage_mounts,
                                                      **task.storage_mounts}})
