"""Staging: the client uploads a task's workdir and local file mounts to a store every
worker can read, before any workflow starts, and puts only a reference in the task
(:class:`orch.contracts.staging.StagedFiles`). Workers sync from there
(``orch.staging_cache``), so no worker needs the CLI's disk.

Where: the config's ``staging:`` (``ORCH_STAGING``), a bucket URI such as
``s3://my-bucket/orch``; without one, the ``local`` store's bucket ``orch-staging`` under
``$ORCH_HOME/storage``, which the embedded control plane's worker shares with the CLI
(a worker on another host cannot read it: such setups set ``staging:``).

Layout under the root's prefix, content-addressed::

    files/<digest>/<path>             the tree's files, as uploaded
    manifests/<digest>/manifest.json  written last: the tree is complete

``<digest>`` is the SHA-256 of the manifest (each file's path, size, mode and SHA-256), so
an unchanged workdir has the same digest and is not uploaded again: one listing of its
manifest's prefix finds it. An upload cut short is resumed by the next launch (the store's
upload skips objects already there). Which files: those a bucket upload takes
(``orch.storage.upload.local_files``, after SkyPilot's storage sync): symlinks inside the
tree, special files and the top-level ``.git`` are left out; empty directories are not
kept. Staged trees are not deleted by orch today (they are small and shared by every task
that has the same files): see README, "Staging".
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from orch.contracts.staging import StagedFiles, StagedTree
from orch.spec import Task
from orch.spec_storage import parse_bucket_uri
from orch.storage import get_store
from orch.storage.base import BucketRef, Store, StoreKind
from orch.storage.upload import local_files

DEFAULT_BUCKET = "orch-staging"
MANIFEST = "manifest.json"
_CHUNK = 1 << 20


class ManifestEntry(BaseModel):
    path: str  # relative, '/'-separated; a single file's own name
    size: int
    mode: int  # permission bits (an executable stays executable)
    sha256: str


class Manifest(BaseModel):
    entries: list[ManifestEntry]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


@dataclass(frozen=True)
class StageReport:
    """One staged tree: where it came from, and what this call uploaded (0 files and
    ``reused``: it was staged before)."""

    source: str
    tree: StagedTree
    files: int
    uploaded: int
    reused: bool


def staging_root(configured: str | None) -> BucketRef:
    """The staging store's bucket and prefix: ``configured`` (a bucket URI, checked by the
    config's loader), else the local store's ``orch-staging``."""
    if configured:
        return parse_bucket_uri(configured)
    return BucketRef(store=StoreKind.LOCAL, name=DEFAULT_BUCKET)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(source: Path) -> Manifest:
    return Manifest(entries=[
        ManifestEntry(path=f.key, size=f.size, sha256=file_sha256(f.path),
                      mode=stat.S_IMODE(os.stat(f.path).st_mode))
        for f in local_files(source, "")
    ])


def _ref(root: BucketRef, prefix: str) -> BucketRef:
    return root.model_copy(update={"prefix": prefix})


def is_staged(store: Store, tree: StagedTree) -> bool:
    """Whether the tree's manifest (written last) is in the store."""
    return any(True for _ in store.list(_ref(tree.root, tree.manifest_prefix)))


def stage(source: Path, root: BucketRef, store: Store) -> StageReport:
    """Upload ``source`` (a directory, or one file) as a staged tree, unless it is there."""
    manifest = build_manifest(source)
    single = source.is_file()
    tree = StagedTree(root=root, digest=manifest.digest,
                      file_name=manifest.entries[0].path if single else None)
    report = StageReport(str(source), tree, len(manifest.entries), 0, reused=True)
    if not store.exists(root):
        store.create(root)
    elif is_staged(store, tree):
        return report
    uploaded = store.upload_dir(source, _ref(root, tree.files_prefix)).uploaded
    with tempfile.TemporaryDirectory(prefix="orch-manifest-") as tmp:
        written = Path(tmp) / MANIFEST
        written.write_text(manifest.model_dump_json())
        store.upload_dir(written, _ref(root, tree.manifest_prefix))
    return StageReport(str(source), tree, len(manifest.entries), uploaded, reused=False)


def stage_task(task: Task, configured: str | None) -> tuple[Task, list[StageReport]]:
    """``task`` with its workdir and local file mounts staged (``Task.staged``); a task with
    neither is returned as it is."""
    if not task.workdir and not task.file_mounts:
        return task, []
    root = staging_root(configured)
    store = get_store(root.store)
    reports = []
    workdir = None
    if task.workdir:
        reports.append(stage(Path(task.workdir), root, store))
        workdir = reports[-1].tree
    mounts = {}
    for remote, local in task.file_mounts.items():
        reports.append(stage(Path(local), root, store))
        mounts[remote] = reports[-1].tree
    staged = StagedFiles(workdir=workdir, file_mounts=mounts)
    return task.model_copy(update={"staged": staged}), reports
