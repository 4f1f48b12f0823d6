"""The ``local`` store, for the embedded cloud: a bucket is a directory under
``$ORCH_HOME/storage/``, an object a file in it (its key the relative path).

Local-cloud nodes are sandboxes on this same machine, so a node reaches a bucket through
rclone's ``local`` backend (a path on this machine) and needs no credential. Writes are
atomic: a file is copied beside its final name (``.orch-part-*``, never listed) and
renamed into place; a bucket is deleted by renaming it aside first (``.deleting-*``), so
it vanishes at once and a delete cut short leaves no half-bucket under its name.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orch.config import orch_home
from orch.storage.base import (
    BucketRef,
    ObjectInfo,
    RcloneRemote,
    StoreKind,
    UploadProgress,
    UploadReport,
)
from orch.storage.errors import AccessDenied, BadName, NoSuchBucket, StorageError
from orch.storage.names import describe, local_name_problems
from orch.storage.upload import DEFAULT_WORKERS, LocalFile, file_md5, local_files, upload_files

_PART = ".orch-part-"
_DELETING = ".deleting-"


@contextmanager
def _os_errors(bucket: BucketRef) -> Iterator[None]:
    """OSErrors as store errors, naming the bucket and keeping errno's name as the code."""
    try:
        yield
    except PermissionError as e:
        raise AccessDenied(f"no permission on local bucket {bucket.name}: {e.filename}",
                           code="EACCES") from e
    except OSError as e:
        code = errno.errorcode.get(e.errno or 0, "OSError")
        raise StorageError(f"local bucket {bucket.name}: {e.strerror or e} ({e.filename})",
                           code=code) from e


class LocalStore:
    """Buckets as directories under ``root`` (default ``$ORCH_HOME/storage``, read at each
    call so a changed ``ORCH_HOME`` is followed)."""

    kind = StoreKind.LOCAL

    def __init__(self, root: Path | None = None, *, workers: int = DEFAULT_WORKERS):
        self._root = root
        self.workers = workers

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else orch_home() / "storage"

    def validate_name(self, name: str) -> list[str]:
        return local_name_problems(name)

    def _bucket_dir(self, bucket: BucketRef) -> Path:
        if problems := self.validate_name(bucket.name):
            raise BadName(describe("local", bucket.name, problems), code="InvalidBucketName")
        return self.root / bucket.name

    def _prefix_dir(self, bucket: BucketRef) -> Path:
        parts = [p for p in bucket.prefix.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise BadName(f"prefix {bucket.prefix!r} of local bucket {bucket.name} may not "
                          "contain '.' or '..' parts", code="InvalidPrefix")
        return self._bucket_dir(bucket).joinpath(*parts)

    def _existing(self, bucket: BucketRef) -> Path:
        directory = self._bucket_dir(bucket)
        if not directory.is_dir():
            raise NoSuchBucket(f"local bucket {bucket.name} does not exist (no {directory})",
                               code="NoSuchBucket")
        return directory

    def exists(self, bucket: BucketRef) -> bool:
        return self._bucket_dir(bucket).is_dir()

    def create(self, bucket: BucketRef) -> bool:
        directory = self._bucket_dir(bucket)
        with _os_errors(bucket):
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                directory.mkdir()
            except FileExistsError:
                return False
        return True

    def upload_dir(self, source: Path, bucket: BucketRef,
                   progress: Callable[[UploadProgress], None] | None = None) -> UploadReport:
        bucket_dir = self._existing(bucket)
        files = local_files(source, bucket.prefix)

        def put(file: LocalFile, _md5: bytes) -> None:
            self._write(bucket, bucket_dir / file.key,
                        lambda part: shutil.copyfile(file.path, part))

        return upload_files(files, self.list(bucket), put, progress, self.workers)

    @staticmethod
    def _write(bucket: BucketRef, target: Path, fill: Callable[[Path], object]) -> None:
        """``fill`` a file beside ``target``, then rename it into place."""
        with _os_errors(bucket):
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.parent / f"{_PART}{uuid.uuid4().hex}"
            try:
                fill(part)
                os.replace(part, target)
            finally:
                part.unlink(missing_ok=True)

    def put(self, bucket: BucketRef, key: str, data: bytes) -> None:
        self._existing(bucket)
        self._write(bucket, self._prefix_dir(bucket.model_copy(update={"prefix": key})),
                    lambda part: part.write_bytes(data))

    def list(self, bucket: BucketRef) -> Iterator[ObjectInfo]:
        bucket_dir = self._existing(bucket)
        start = self._prefix_dir(bucket)
        with _os_errors(bucket):
            for directory, _, names in os.walk(start):
                for name in sorted(names):
                    path = Path(directory) / name
                    if name.startswith(_PART) or not path.is_file():
                        continue
                    yield ObjectInfo(key=path.relative_to(bucket_dir).as_posix(),
                                     size=path.stat().st_size, md5=file_md5(path).hex())

    def download(self, bucket: BucketRef, key: str, target: Path) -> None:
        source = self._prefix_dir(bucket.model_copy(update={"prefix": key}))
        with _os_errors(bucket):
            shutil.copyfile(source, target)

    def rclone_remote(self, bucket: BucketRef) -> RcloneRemote:
        return RcloneRemote(type="local", options={}, path=str(self._prefix_dir(bucket)))

    def rclone_secrets(self, bucket: BucketRef) -> dict[str, str]:
        return {}

    def delete(self, bucket: BucketRef) -> bool:
        directory = self._bucket_dir(bucket)
        aside = self.root / f"{_DELETING}{bucket.name}-{uuid.uuid4().hex[:8]}"
        with _os_errors(bucket):
            try:
                directory.rename(aside)
            except FileNotFoundError:
                return False
            shutil.rmtree(aside)
            for leftover in self.root.glob(f"{_DELETING}{bucket.name}-*"):
                shutil.rmtree(leftover, ignore_errors=True)  # an earlier delete cut short
        return True
