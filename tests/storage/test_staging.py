"""Staging (``orch.staging``, ``orch.staging_cache``) against each store's real server: a
tree is staged once (a second stage of the same files puts nothing), fetched whole into a
worker's cache with its modes, fetched once per host, and a tree the store lacks is an
error that says how to configure staging; a job's output stored in chunks is read back
in order, each byte once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orch.job_output import OutputReader, attempt_output, chunk_key, store_chunk
from orch.staging import stage, staging_root
from orch.staging_cache import StagingError, fetch
from orch.storage.base import Store, StoreKind
from tests.storage.conftest import new_bucket
from tests.storage.test_contract import make_tree


def workdir(root: Path) -> dict[str, bytes]:
    contents = make_tree(root)
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    contents["run.sh"] = b"#!/bin/sh\necho hi\n"
    (root / ".git").mkdir()  # left out, as a bucket upload leaves it out
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "link").symlink_to(root / "a.txt")  # left out too
    return contents


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*") if p.is_file()}


def test_a_tree_is_staged_once_and_fetched_whole(store: Store, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    contents = workdir(tmp_path / "src")
    root = new_bucket(store, prefix="orch/staging")  # not made yet: staging makes it
    first = stage(tmp_path / "src", root, store)
    assert (first.reused, first.files, first.uploaded) == (False, len(contents), len(contents))
    objects = sorted(o.key for o in store.list(root))
    assert len(objects) == len(contents) + 1  # the files and the manifest

    def no_upload(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged tree was uploaded again")

    upload_dir = store.upload_dir
    monkeypatch.setattr(store, "upload_dir", no_upload)
    again = stage(tmp_path / "src", root, store)
    assert again.reused and again.tree == first.tree
    assert sorted(o.key for o in store.list(root)) == objects
    monkeypatch.setattr(store, "upload_dir", upload_dir)

    cache = tmp_path / "worker-cache"
    fetched = fetch(first.tree, store, root=cache)
    assert tree_of(fetched) == contents
    assert stat.S_IMODE(os.stat(fetched / "run.sh").st_mode) == 0o755
    assert [p.name for p in cache.iterdir()] == [first.tree.digest]  # no part left

    def no_download(*args: object) -> None:
        raise AssertionError("a cached tree was downloaded again")

    monkeypatch.setattr(store, "download", no_download)
    assert fetch(first.tree, store, root=cache) == fetched


def test_a_single_file_is_staged_under_its_name_and_a_change_is_a_new_tree(
    store: Store, tmp_path: Path,
) -> None:
    source = tmp_path / "data.csv"
    source.write_text("a,b\n1,2\n")
    root = new_bucket(store)
    first = stage(source, root, store)
    assert first.tree.file_name == "data.csv"
    assert fetch(first.tree, store, root=tmp_path / "cache").read_text() == "a,b\n1,2\n"
    source.write_text("a,b\n3,4\n")
    changed = stage(source, root, store)
    assert not changed.reused and changed.tree.digest != first.tree.digest
    assert fetch(changed.tree, store, root=tmp_path / "cache").read_text() == "a,b\n3,4\n"


def test_a_tree_the_store_lacks_says_how_to_configure_staging(store: Store,
                                                              tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "x").write_text("x")
    root = new_bucket(store)
    tree = stage(source, root, store).tree
    elsewhere = tree.model_copy(update={"root": root.model_copy(update={"prefix": "other"})})
    with pytest.raises(StagingError, match="staging:") as raised:
        fetch(elsewhere, store, root=tmp_path / "cache")
    assert raised.value.code == "NoSuchStagedTree" and not raised.value.retryable
    assert not (tmp_path / "cache" / tree.digest).exists()


def test_the_staging_root_is_the_configured_uri_else_the_local_store() -> None:
    assert staging_root(None).uri == "local://orch-staging"
    configured = staging_root("s3://team-bucket/orch/staging")
    assert (configured.store, configured.name, configured.prefix) == (
        StoreKind.S3, "team-bucket", "orch/staging")


def test_job_output_chunks_are_read_in_order_each_byte_once(store: Store) -> None:
    """As a watch stores them: flushes at offsets 0 and 12, then a watch resumed on
    another worker stores the whole copy again from 0, then more."""
    where = attempt_output(7, 0, 2, root=new_bucket(store, prefix="staging"))
    lines: list[str] = []
    reader = OutputReader(where, lines.append)
    assert reader.read_new() == 0  # no bucket yet: nothing, no error
    output = b"step 1 done\nstep 2 done\nstep 3 "
    store_chunk(store, where, 0, output[:12])
    store_chunk(store, where, 12, output[12:24])
    assert reader.read_new() == 24 and lines == ["step 1 done", "step 2 done"]
    store_chunk(store, where, 0, output)  # the resumed watch's copy, from the start
    store_chunk(store, where, len(output), b"done\nstep 4")
    reader.read_new()
    reader.finish()
    assert lines == ["step 1 done", "step 2 done", "step 3 done", "step 4"]
    assert sorted(o.key for o in store.list(where)) == [
        chunk_key(where, 0), chunk_key(where, 12), chunk_key(where, len(output))]
