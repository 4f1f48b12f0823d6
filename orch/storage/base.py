"""The store interface every storage service implements, and its small records.

After SkyPilot's ``sky/data/storage.py`` stores, cut down to what a launch needs: make a
bucket (idempotently), upload a directory into it, list it, delete it. Everything is keyed
by a :class:`BucketRef`, a plain record that can cross the Temporal boundary (it holds no
credential: stores read those where their SDK keeps them, on the worker). Nothing here
knows about Temporal.

Uploads are incremental: an object whose size and content hash match the local file is
skipped, so an interrupted upload resumes by running it again, and an unchanged workdir
costs one listing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict


class StoreKind(StrEnum):
    """SkyPilot's ``store:`` values (lower case here; the spec accepts either case)."""

    S3 = "s3"
    GCS = "gcs"
    AZURE = "azure"
    LOCAL = "local"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class BucketRef(_Record):
    """One bucket (an Azure container) and an optional key prefix inside it. ``region``
    is where it lives or is to be made; ``account`` is Azure's storage account."""

    store: StoreKind
    name: str
    prefix: str = ""
    region: str | None = None
    account: str | None = None

    @property
    def uri(self) -> str:
        """As a user writes it: ``s3://b/p``, ``gs://b/p``, ``local://b/p``,
        ``https://<account>.blob.core.windows.net/<container>/p``."""
        tail = f"/{self.prefix.strip('/')}" if self.prefix.strip("/") else ""
        if self.store is StoreKind.AZURE:
            return f"https://{self.account}.blob.core.windows.net/{self.name}{tail}"
        scheme = {StoreKind.S3: "s3", StoreKind.GCS: "gs", StoreKind.LOCAL: "local"}[self.store]
        return f"{scheme}://{self.name}{tail}"


class ObjectInfo(_Record):
    """One object: its key (relative to the bucket), size, and the hash the store keeps
    (hex MD5 where the service gives one, else orch's own hash from object metadata;
    None when neither is known, and then the object is uploaded again)."""

    key: str
    size: int
    md5: str | None = None


class UploadProgress(_Record):
    """Where an upload stands, for a heartbeat and a progress bar."""

    files_total: int
    files_done: int
    files_skipped: int
    bytes_total: int
    bytes_done: int


class RcloneRemote(_Record):
    """How a node reaches the bucket with rclone (mounts and COPY): the remote's
    ``type`` and options in rclone's config keys (``provider``, ``endpoint``,
    ``env_auth``...), and the ``path`` (``bucket/prefix``) to mount or copy. It holds no
    secret, so it may travel in a workflow record; credentials, where the node has no
    role of its own, come from :meth:`Store.rclone_secrets` on the worker, out of band."""

    type: str
    options: dict[str, str]
    path: str


class UploadReport(_Record):
    uploaded: int
    skipped: int
    bytes_uploaded: int


@runtime_checkable
class Store(Protocol):
    """One storage service. Calls raise :mod:`orch.storage.errors` types."""

    kind: StoreKind

    def validate_name(self, name: str) -> list[str]:
        """What is wrong with ``name`` under this store's naming rules (empty: nothing);
        pure, so the spec can check names before anything starts."""

    def exists(self, bucket: BucketRef) -> bool: ...

    def create(self, bucket: BucketRef) -> bool:
        """Make the bucket; True when this call made it, False when it was already there
        and ours to use (a retried create is not an error). Raise NameTaken when another
        owner has the name."""

    def upload_dir(self, source: Path, bucket: BucketRef,
                   progress: Callable[[UploadProgress], None] | None = None) -> UploadReport:
        """Upload every file under ``source`` to ``bucket.prefix``/<relative path>, in
        parallel, skipping objects whose size and hash already match."""

    def list(self, bucket: BucketRef) -> Iterator[ObjectInfo]:
        """Every object under ``bucket.prefix``, keys relative to the bucket."""

    def put(self, bucket: BucketRef, key: str, data: bytes) -> None:
        """Write one small object (a chunk of a job's output) whole, replacing any."""

    def download(self, bucket: BucketRef, key: str, target: Path) -> None:
        """Write the object ``key`` (relative to the bucket, as :meth:`list` gives it) to
        ``target``, overwriting it; the caller writes beside its final path and renames."""

    def rclone_remote(self, bucket: BucketRef) -> RcloneRemote: ...

    def rclone_secrets(self, bucket: BucketRef) -> dict[str, str]:
        """The rclone options that are secret (keys, tokens; short-lived where the store
        can make them), read on the worker and passed to the node out of band, never in
        a workflow input, result or log. Empty when the node authenticates by itself."""

    def delete(self, bucket: BucketRef) -> bool:
        """Delete every object and the bucket itself; True when this call removed it,
        False when it was already gone (a retried delete is not an error)."""
