"""The upload every store shares: which local files go where, which of them the bucket
already holds (same size, same MD5), and a bounded thread pool that puts the rest.

What is uploaded follows SkyPilot's storage sync (``sky/data/storage.py``: ``aws s3 sync
--no-follow-symlinks --exclude '.git/*'``, ``gsutil rsync -e -x '.git/*'``): the source
itself may be a symlink (it is resolved), but symlinks inside it are skipped, not
followed, and so are sockets, FIFOs and devices; the top-level ``.git`` directory is left
out. Skipped links and special files are logged, once per upload.

Resuming: every object is written whole or not at all (a single PUT, a multipart upload
completed at the end, a file renamed into place), so after an interruption the bucket
holds some complete objects and no partial ones; running the upload again lists the
bucket, skips what matches and puts the rest.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from orch.storage.base import ObjectInfo, UploadProgress, UploadReport
from orch.storage.errors import StorageError

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 8
PROGRESS_INTERVAL = 5.0  # seconds between progress calls while nothing completes
_CHUNK = 1 << 20
_EXCLUDED_TOP = frozenset({".git"})


@dataclass(frozen=True)
class LocalFile:
    """One regular file to upload: where it is, the full object key, its size."""

    path: Path
    key: str
    size: int


def key_prefix(prefix: str) -> str:
    """A listing prefix: ``runs/1/`` for ``runs/1`` (so ``runs/10`` is not matched), empty
    for the whole bucket."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def object_key(prefix: str, relative: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{relative}" if prefix else relative


def local_files(source: Path, prefix: str) -> list[LocalFile]:
    """The regular files under ``source`` (or ``source`` itself when it is a file), keyed
    ``prefix/<path relative to source>``, in a stable order."""
    root = Path(os.path.realpath(source))
    try:
        top = root.stat()
    except OSError as e:
        raise StorageError(f"cannot read upload source {source}: {e.strerror or e}",
                           code="SourceUnreadable", retryable=False) from e
    if stat.S_ISREG(top.st_mode):
        return [LocalFile(root, object_key(prefix, root.name), top.st_size)]
    files: list[LocalFile] = []
    left_out: list[str] = []
    for directory, subdirs, names in os.walk(root, onerror=_raise_walk_error):
        here = Path(directory)
        if here == root:
            subdirs[:] = [d for d in subdirs if d not in _EXCLUDED_TOP]
        left_out += [str(here / d) for d in subdirs if (here / d).is_symlink()]
        for name in names:
            path = here / name
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                left_out.append(str(path))
                continue
            relative = path.relative_to(root).as_posix()
            files.append(LocalFile(path, object_key(prefix, relative), info.st_size))
    if left_out:
        log.warning("upload of %s leaves out %d symlink(s) or special file(s), as SkyPilot "
                    "does: %s", source, len(left_out), ", ".join(sorted(left_out)[:10]))
    return sorted(files, key=lambda f: f.key)


def _raise_walk_error(error: OSError) -> None:
    raise StorageError(f"cannot read {error.filename}: {error.strerror or error}",
                       code="SourceUnreadable", retryable=False) from error


def file_md5(path: Path) -> bytes:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.digest()


def b64(digest: bytes) -> str:
    """An MD5 as GCS's ``md5Hash``, Azure's ``Content-MD5`` and rclone's metadata have it."""
    return base64.b64encode(digest).decode()


def hex_from_b64(value: str | bytes | bytearray | None) -> str | None:
    """Base64 (text or raw bytes, as the SDKs hand them) to hex; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = base64.b64decode(value, validate=True)
        except ValueError:
            return None
    return bytes(value).hex() or None


Put = Callable[[LocalFile, bytes], None]
"""Write one file to its key, given its MD5 digest; the object must appear whole or not."""


class _Tally:
    def __init__(self, files: list[LocalFile]):
        self.files_total = len(files)
        self.bytes_total = sum(f.size for f in files)
        self.files_done = self.files_skipped = self.bytes_done = self.bytes_uploaded = 0

    def add(self, file: LocalFile, uploaded: bool) -> None:
        self.files_done += 1
        self.bytes_done += file.size
        if uploaded:
            self.bytes_uploaded += file.size
        else:
            self.files_skipped += 1

    def progress(self) -> UploadProgress:
        return UploadProgress(files_total=self.files_total, files_done=self.files_done,
                              files_skipped=self.files_skipped, bytes_total=self.bytes_total,
                              bytes_done=self.bytes_done)

    def report(self) -> UploadReport:
        return UploadReport(uploaded=self.files_done - self.files_skipped,
                            skipped=self.files_skipped, bytes_uploaded=self.bytes_uploaded)


class _Stopped(Exception):
    """A file not started because the upload is stopping."""


def upload_files(files: list[LocalFile], existing: Iterable[ObjectInfo], put: Put,
                 progress: Callable[[UploadProgress], None] | None = None,
                 workers: int = DEFAULT_WORKERS,
                 progress_interval: float = PROGRESS_INTERVAL) -> UploadReport:
    """Put every file whose object is missing or differs in size or MD5, ``workers`` at a
    time. ``progress`` is called from this thread, once before any file, as files
    complete, and every ``progress_interval`` seconds while a large file is still going
    (so an activity that heartbeats from it keeps beating). If ``progress`` raises, or a
    put fails, no further file starts, those in flight finish, and the (first) exception
    propagates: the next run resumes."""
    held = {o.key: o for o in existing}
    tally = _Tally(files)
    stop = threading.Event()

    def one(file: LocalFile) -> bool:
        if stop.is_set():
            raise _Stopped
        try:
            digest = file_md5(file.path)
            have = held.get(file.key)
            if have is not None and have.size == file.size and have.md5 == digest.hex():
                return False
            put(file, digest)
        except BaseException:
            stop.set()
            raise
        return True

    if progress:
        progress(tally.progress())
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="orch-upload")
    try:
        pending: dict[Future[bool], LocalFile] = {pool.submit(one, f): f for f in files}
        while pending:
            finished, _ = wait(pending, timeout=progress_interval,
                               return_when=FIRST_COMPLETED)
            for future in finished:
                file, error = pending.pop(future), future.exception()
                if error is None:
                    tally.add(file, future.result())
                elif not isinstance(error, _Stopped):  # the failure that stopped the rest
                    raise error
            if progress:
                progress(tally.progress())
    finally:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
    return tally.report()
