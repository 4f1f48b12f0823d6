"""The worker's side of staging (``orch.staging``): a staged tree fetched from the staging
store into ``$ORCH_HOME/staging-cache/<digest>`` on the worker's host, from which the sync
copies it to the nodes as it copied local paths before.

Crash-safe: a tree is downloaded into ``.part-<random>`` beside its final name, each file
checked against the manifest (size and SHA-256) and given its mode, then renamed into
place, so a cache entry is always whole; what a killed fetch left is removed by the next.
Two fetches of one tree at once both complete; the second rename finds the entry there
and drops its copy. A tree the store does not hold (a ``local`` staging store the worker
cannot see, a bucket emptied by hand) is an error naming the store and the cure.
"""

from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orch.config import orch_home
from orch.contracts.staging import StagedTree
from orch.staging import MANIFEST, Manifest, ManifestEntry, file_sha256
from orch.storage.base import Store
from orch.storage.errors import StorageError

_PART = ".part-"
DOWNLOAD_WORKERS = 8


class StagingError(StorageError):
    """A staged tree that cannot be used: missing from the store, or not what its manifest
    says. Another attempt cannot help."""

    retryable = False


def cache_root() -> Path:
    return orch_home() / "staging-cache"


def fetched_path(tree: StagedTree, root: Path | None = None) -> Path:
    """Where the tree is once fetched: its directory, or the single file in it."""
    entry = (root or cache_root()) / tree.digest
    return entry / tree.file_name if tree.file_name else entry


def fetch(tree: StagedTree, store: Store, root: Path | None = None) -> Path:
    """The tree in this host's cache, downloaded first unless it is there (files
    ``DOWNLOAD_WORKERS`` at a time)."""
    root = root or cache_root()
    final = root / tree.digest
    if final.is_dir():
        return fetched_path(tree, root)
    root.mkdir(parents=True, exist_ok=True)
    for leftover in root.glob(f"{tree.digest}{_PART}*"):
        shutil.rmtree(leftover, ignore_errors=True)  # a fetch that was killed
    part = root / f"{tree.digest}{_PART}{uuid.uuid4().hex[:8]}"
    try:
        _download(tree, store, part)
        try:
            part.rename(final)
        except OSError:
            if not final.is_dir():  # not another fetch's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return fetched_path(tree, root)


def _manifest(tree: StagedTree, store: Store, into: Path) -> Manifest:
    key = f"{tree.manifest_prefix}/{MANIFEST}"
    listed = {o.key for o in store.list(tree.root.model_copy(
        update={"prefix": tree.manifest_prefix}))}
    if key not in listed:
        raise StagingError(
            f"staged files {tree.digest[:12]} are not in {tree.root.uri} as this worker "
            "sees it: the staging store must be one every worker can read (set `staging:` "
            "in orch's config, or ORCH_STAGING, to a bucket, on the CLI's host and the "
            "workers'), or the files were removed; launch again to stage them anew",
            code="NoSuchStagedTree")
    into.mkdir(parents=True)
    store.download(tree.root, key, into / MANIFEST)
    manifest = Manifest.model_validate_json((into / MANIFEST).read_text())
    (into / MANIFEST).unlink()
    if manifest.digest != tree.digest:
        raise StagingError(f"the manifest of staged files {tree.digest[:12]} in "
                           f"{tree.root.uri} does not match its name", code="BadManifest")
    return manifest


def _download(tree: StagedTree, store: Store, part: Path) -> None:
    manifest = _manifest(tree, store, part)

    def one(entry: ManifestEntry) -> None:
        target = part.joinpath(*entry.path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        store.download(tree.root, f"{tree.files_prefix}/{entry.path}", target)
        if target.stat().st_size != entry.size or file_sha256(target) != entry.sha256:
            raise StagingError(
                f"staged file {entry.path} of {tree.digest[:12]} in {tree.root.uri} is not "
                "the one the launch hashed (it changed while it was uploaded?): launch again",
                code="StagedFileChanged")
        os.chmod(target, entry.mode)

    with ThreadPoolExecutor(max_workers=DOWNLOAD_WORKERS) as pool:
        list(pool.map(one, manifest.entries))
