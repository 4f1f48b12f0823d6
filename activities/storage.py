"""Storage activities: a bucket's store calls, its entity's Updates, and its mounts on the
nodes.

The store calls (``bucket_exists``, ``create_bucket``, ``delete_bucket``) are
StorageWorkflow's; each heartbeats from a side thread while the store works, and is
idempotent (a retried create or delete says it found the work done). The others are the
launch's and the teardown's (:class:`StorageActivities`, which need a Temporal client):
``prepare_bucket`` attaches the cluster (and its managed job) to the bucket's entity,
which makes the bucket; ``upload_to_bucket`` uploads the task's local sources into it;
``mount_buckets`` brings every bucket to its path on every node; ``release_bucket``
detaches a user, the entity deleting what nobody keeps. ``unmount_buckets`` is the
teardown's best-effort first step.

Credentials never leave the worker except to a node, out of band: each mount's rclone
config (remote, options and the store's ``rclone_secrets``) is written to a 0600 file in
a 0700 directory on the node over the command runner, read once by rclone, and removed
(``orch.runtime.mounts``). No secret is in an activity's input, result or heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.errors import typed_errors
from activities.heartbeat import Heartbeats
from orch.client.attribution import start_attributes
from orch.clouds.base import NodeInfo
from orch.clouds.errors import SetupError
from orch.contracts.storage import (
    ATTACH_UPDATE,
    BUCKET_EXISTS,
    CACHE_LIMIT,
    CREATE_BUCKET,
    DELETE_BUCKET,
    DETACH_UPDATE,
    MOUNT_BUCKETS,
    PREPARE_BUCKET,
    RELEASE_BUCKET,
    STORAGE_WORKFLOW,
    UNMOUNT_BUCKETS,
    UPLOAD_TO_BUCKET,
    AttachRequest,
    BucketMount,
    DetachRequest,
    MountRequest,
    PrepareRequest,
    ReleaseRequest,
    StorageInput,
    StorageRecord,
    StorageStatus,
    UnmountRequest,
    UploadRequest,
    storage_workflow_id,
)
from orch.records import PROGRESS_SIGNAL, LaunchProgress
from orch.runtime.mount_tools import ensure_mount_tools, node_module
from orch.runtime.mounts import ERROR, FAILED, PROGRESS, NodeMount, NodeMounts
from orch.runtime.rclone_commands import config_text, mount_id
from orch.runtime.runner import CommandRunner, NodeUnreachableError, runner_for
from orch.spec_storage import StorageMode
from orch.storage import get_store
from orch.storage.base import BucketRef, UploadProgress, UploadReport
from orch.storage.errors import StorageError

T = TypeVar("T")
REPORT_EVERY_S = 5.0  # progress signals to the launch's parent, at most this often
SECRETS_DIR = ".orch-node/secrets"  # on the node: 0700, one 0600 rclone config per mount
UNREACHABLE_AFTER_S = 10.0


def as_application_error(error: StorageError) -> ApplicationError:
    return ApplicationError(error.message, {"code": error.code}, type=type(error).__name__,
                            non_retryable=not error.retryable)


def _store_call(name: str, bucket: BucketRef, call: Callable[[], T]) -> T:
    with Heartbeats(f"{name} {bucket.uri}"):
        try:
            return call()
        except StorageError as error:
            raise as_application_error(error) from error


@activity.defn(name=BUCKET_EXISTS)
def bucket_exists(bucket: BucketRef) -> bool:
    return _store_call("exists", bucket, lambda: get_store(bucket.store).exists(bucket))


@activity.defn(name=CREATE_BUCKET)
def create_bucket(bucket: BucketRef) -> bool:
    """True when this call made the bucket, False when it was there (a retry)."""
    return _store_call("create", bucket, lambda: get_store(bucket.store).create(bucket))


@activity.defn(name=DELETE_BUCKET)
def delete_bucket(bucket: BucketRef) -> bool:
    """True when this call removed the bucket, False when it was gone (a retry)."""
    return _store_call("delete", bucket, lambda: get_store(bucket.store).delete(bucket))


def _in_parallel(nodes: list[NodeInfo], fn: Callable[[NodeInfo], T]) -> list[T]:
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        return list(pool.map(fn, nodes))


@activity.defn(name=UNMOUNT_BUCKETS)
@typed_errors
def unmount_buckets(request: UnmountRequest) -> list[str]:
    """Unmount the buckets on every node that answers (best effort, before a stop or a
    terminate); returns what could not be done."""
    paths = NodeMounts(mounts=[_node_mount(m, "") for m in request.mounts])

    def unmount(node: NodeInfo) -> str | None:
        try:
            with runner_for(node, connect_deadline=UNREACHABLE_AFTER_S) as runner:
                _upload_json(runner, paths.model_dump_json(), ".orch-node/unmount.json")
                result = runner.run(node_module(node, "unmount ~/.orch-node/unmount.json"),
                                    timeout=240)
        except NodeUnreachableError:
            return None  # gone with its mounts
        return None if result.ok else f"unmount on {node.instance_id}: {result.tail}"

    with Heartbeats("unmounting buckets"):
        return [problem for problem in _in_parallel(request.info.nodes, unmount) if problem]


def _node_mount(mount: BucketMount, config: str) -> NodeMount:
    remote = get_store(mount.bucket.store).rclone_remote(mount.bucket) if config else None
    return NodeMount(path=mount.path, mode=mount.mode, uri=mount.bucket.uri,
                     remote_path=remote.path if remote else "", config=config,
                     cache_limit=CACHE_LIMIT)


def _upload_json(runner: CommandRunner, text: str, remote: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "spec.json"
        local.write_text(text)
        runner.upload(str(local), remote)


def _path_style(remote_type: str, options: dict[str, str]) -> dict[str, str]:
    """rclone addresses ``provider = AWS`` buckets as virtual hosts (``bucket.endpoint``),
    whatever ``force_path_style`` says, which an S3-compatible endpoint of its own (moto,
    MinIO: often an address, not a domain) cannot serve: such an endpoint is rclone's
    ``Other`` provider, in path style, as boto3 addresses it."""
    if remote_type == "s3" and "endpoint" in options:
        return {**options, "provider": "Other", "force_path_style": "true"}
    return options


def _send_configs(runner: CommandRunner, mounts: list[BucketMount]) -> list[str]:
    """Each mount's rclone config, with its credentials, as a 0600 file in a 0700
    directory on the node (made so before anything is written into it); their paths."""
    runner.check(f"umask 077 && mkdir -p ~/{SECRETS_DIR} && chmod 700 ~/{SECRETS_DIR}",
                 timeout=60)
    paths = []
    with tempfile.TemporaryDirectory() as tmp:
        for mount in mounts:
            store = get_store(mount.bucket.store)
            remote = store.rclone_remote(mount.bucket)
            text = config_text(remote.type, {**_path_style(remote.type, remote.options),
                                             **store.rclone_secrets(mount.bucket)})
            name = f"rclone-{mount_id(mount.path)}.conf"
            local = Path(tmp) / name
            local.touch(mode=0o600)
            local.write_text(text)
            target = f"{SECRETS_DIR}/{name}"
            runner.upload(str(local), target)
            paths.append(target)
    return paths


def _mount_on(node: NodeInfo, mounts: list[BucketMount], tell: Callable[[str], None]) -> None:
    with runner_for(node) as runner:
        ensure_mount_tools(runner, node, fuse=any(m.mode != StorageMode.COPY for m in mounts))
        configs = _send_configs(runner, mounts)
        home = runner.run("echo $HOME", timeout=60).tail.strip().splitlines()[-1]
        spec = NodeMounts(mounts=[_node_mount(m, f"{home}/{c}")
                                  for m, c in zip(mounts, configs, strict=True)])
        _upload_json(runner, spec.model_dump_json(), ".orch-node/mount.json")
        errors: list[str] = []

        def line(text: str) -> None:
            if text.startswith(PROGRESS):
                tell(f"{node.instance_id}: COPY {text.removeprefix(PROGRESS).strip()}")
            elif text.startswith(ERROR):
                errors.append(text.removeprefix(ERROR).strip())

        result = runner.run(node_module(node, "mount ~/.orch-node/mount.json"), on_line=line)
    if result.returncode == FAILED and errors:
        raise SetupError(f"node {node.instance_id}: {errors[-1]}")
    if not result.ok:  # cut short, or a fault: another attempt may do
        raise RuntimeError(f"node {node.instance_id}: attaching the buckets failed (exit code "
                           f"{result.returncode}): {result.tail[-1000:]}")


class StorageActivities:
    """The storage activities that talk to Temporal themselves (see the module doc)."""

    def __init__(self, client: Client, publish_search_attributes: bool = True) -> None:
        self._client = client
        self._publish = publish_search_attributes

    # -- progress ----------------------------------------------------------------------------
    async def _with_progress(self, work: Callable[[Callable[[str], None]], T],
                             report_to: str | None) -> T:
        """Run blocking ``work`` in a thread; what it tells (a progress line) becomes the
        heartbeat's details and, every few seconds, a step of the launch's parent (what
        ``orch launch`` prints)."""
        loop = asyncio.get_running_loop()
        told: list[str] = []

        def tell(step: str) -> None:
            loop.call_soon_threadsafe(told.append, step)

        future = loop.run_in_executor(None, work, tell)
        sent_at = 0.0
        while True:
            done, _ = await asyncio.wait({future}, timeout=1.0)
            step = told[-1] if told else None
            told.clear()
            activity.heartbeat(step)
            if step and report_to and (done or time.monotonic() - sent_at >= REPORT_EVERY_S):
                sent_at = time.monotonic()
                await self._report(report_to, step)
            if done:
                return future.result()

    async def _report(self, workflow_id: str, step: str) -> None:
        with contextlib.suppress(RPCError):  # for the user's eyes only: never fails the work
            await self._client.get_workflow_handle(workflow_id).signal(
                PROGRESS_SIGNAL, LaunchProgress(step=step))

    async def _heartbeating(self, call: Awaitable[T], details: str) -> T:
        task = asyncio.ensure_future(call)
        while True:
            done, _ = await asyncio.wait({task}, timeout=5.0)
            if done:
                return task.result()
            activity.heartbeat(details)

    # -- the launch's ------------------------------------------------------------------------
    @activity.defn(name=PREPARE_BUCKET)
    async def prepare_bucket(self, request: PrepareRequest) -> StorageRecord:
        """Attach the users to the bucket's entity (started if new), which makes the bucket;
        returns its record. A bucket being deleted is retried (``StorageBusy``) until its
        entity is done, and then made anew by a new one."""
        mount, record = request.mount, None
        first = StorageRecord(bucket=mount.bucket, created_by=request.created_by,
                              persistent=mount.persistent, users=list(request.users),
                              source=", ".join(mount.sources))
        summary = f"bucket {mount.bucket.uri}"
        for user in request.users:
            start: WithStartWorkflowOperation[StorageInput, StorageRecord] = (
                WithStartWorkflowOperation(
                    STORAGE_WORKFLOW, StorageInput(record=first,
                                                   publish_search_attributes=self._publish),
                    id=mount.workflow_id, task_queue=activity.info().task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    static_summary=summary,
                    search_attributes=(start_attributes(request.created_by, summary)
                                       if self._publish else None)))
            attach = AttachRequest(user=user, persistent=mount.persistent,
                                   created_by=request.created_by, source=first.source)
            try:
                record = await self._heartbeating(
                    self._client.execute_update_with_start_workflow(
                        ATTACH_UPDATE, attach, start_workflow_operation=start,
                        result_type=StorageRecord), f"attaching {user} to {summary}")
            except WorkflowUpdateFailedError as err:
                cause = err.cause
                if isinstance(cause, ApplicationError):
                    raise ApplicationError(cause.message, type=cause.type,
                                           non_retryable=cause.type != "StorageBusy") from err
                raise
        assert record is not None
        return record

    @activity.defn(name=UPLOAD_TO_BUCKET)
    async def upload_to_bucket(self, request: UploadRequest) -> UploadReport:
        """Upload the sources (a directory's contents to the bucket's root; several, each
        under its own name), skipping what the bucket already holds."""
        store = get_store(request.bucket.store)
        many = len(request.sources) > 1

        def upload(tell: Callable[[str], None]) -> UploadReport:
            reports = []
            for source in request.sources:
                path = Path(source)
                prefix = "/".join(p for p in (request.bucket.prefix,
                                              path.name if many and path.is_dir() else "") if p)
                bucket = request.bucket.model_copy(update={"prefix": prefix})

                def progress(at: UploadProgress, source: str = source) -> None:
                    tell(f"uploading {source} to {request.bucket.uri}: {at.files_done} of "
                         f"{at.files_total} files ({at.files_skipped} unchanged), "
                         f"{at.bytes_done >> 20} of {at.bytes_total >> 20} MiB")

                try:
                    reports.append(store.upload_dir(path, bucket, progress))
                except StorageError as error:
                    raise as_application_error(error) from error
            return UploadReport(uploaded=sum(r.uploaded for r in reports),
                                skipped=sum(r.skipped for r in reports),
                                bytes_uploaded=sum(r.bytes_uploaded for r in reports))

        return await self._with_progress(upload, request.report_to)

    @activity.defn(name=MOUNT_BUCKETS)
    async def mount_buckets(self, request: MountRequest) -> None:
        """rclone (and FUSE) on every node, then each bucket at its path: COPY downloaded,
        MOUNT and MOUNT_CACHED mounted. A node that cannot (no FUSE, a bucket it cannot
        read) fails the launch's setup naming the mount."""

        def attach(tell: Callable[[str], None]) -> None:
            try:
                _in_parallel(request.info.nodes, lambda n: _mount_on(n, request.mounts, tell))
            except StorageError as error:
                raise as_application_error(error) from error
            except SetupError as error:
                raise ApplicationError(str(error), {"tail": error.tail}, type="SetupError",
                                       non_retryable=True) from error

        await self._with_progress(attach, request.report_to)

    # -- the teardown's ------------------------------------------------------------------------
    @activity.defn(name=RELEASE_BUCKET)
    async def release_bucket(self, request: ReleaseRequest) -> list[str]:
        """Detach the user from each bucket's entity, which deletes a bucket nobody keeps
        and then answers; says which buckets went (or why one could not)."""
        said = []
        for bucket in request.buckets:
            handle = self._client.get_workflow_handle(storage_workflow_id(bucket))
            try:
                record = await self._heartbeating(handle.execute_update(
                    DETACH_UPDATE, DetachRequest(user=request.user),
                    result_type=StorageRecord), f"detaching {request.user} from {bucket.uri}")
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                continue  # its entity is done: nothing of it left to release
            if record.status == StorageStatus.DELETED and record.managed:
                said.append(f"bucket {bucket.name} deleted ({bucket.uri})")
            elif record.failure:
                said.append(f"bucket {bucket.name} kept: {record.failure}")
        return said

    def activities(self) -> list[Callable[..., object]]:
        return [self.prepare_bucket, self.upload_to_bucket, self.mount_buckets,
                self.release_bucket]


PLAIN_STORAGE_ACTIVITIES: list[Callable[..., object]] = [
    bucket_exists, create_bucket, delete_bucket, unmount_buckets]
