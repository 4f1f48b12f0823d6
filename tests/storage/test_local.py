"""What only the local store and the shared upload walk do: where buckets live, what a
node mounts, which files an upload leaves out (symlinks and special files, as SkyPilot)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from orch.storage import get_store
from orch.storage.base import BucketRef, StoreKind
from orch.storage.errors import BadName, StorageError
from orch.storage.local import LocalStore


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalStore:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "home"))
    built = get_store("LOCAL")
    assert isinstance(built, LocalStore)
    return built


def test_buckets_are_directories_under_orch_home(store: LocalStore, tmp_path: Path) -> None:
    bucket = BucketRef(store=StoreKind.LOCAL, name="ckpt", prefix="run/1")
    store.create(bucket)
    assert (tmp_path / "home/storage/ckpt").is_dir()
    remote = store.rclone_remote(bucket)
    assert (remote.type, remote.options) == ("local", {})
    assert remote.path == str(tmp_path / "home/storage/ckpt/run/1")
    assert store.rclone_secrets(bucket) == {}


def test_a_prefix_cannot_climb_out_of_its_bucket(store: LocalStore) -> None:
    bucket = BucketRef(store=StoreKind.LOCAL, name="ckpt", prefix="../other")
    store.create(bucket)
    with pytest.raises(BadName):
        store.rclone_remote(bucket)
    with pytest.raises(BadName):
        list(store.list(bucket))


def test_an_upload_leaves_out_links_special_files_and_git(store: LocalStore,
                                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir/secret").write_text("not mine")
    (outside / "file").write_text("linked")
    src = tmp_path / "src"
    (src / ".git").mkdir(parents=True)
    (src / ".git/HEAD").write_text("ref")
    (src / "kept.txt").write_text("kept")
    (src / "nested/.git").mkdir(parents=True)  # only the top-level .git is left out
    (src / "nested/.git/x").write_text("x")
    (src / "link-to-file").symlink_to(outside / "file")
    (src / "link-to-dir").symlink_to(outside / "dir")
    (src / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(src / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        bucket = BucketRef(store=StoreKind.LOCAL, name="tree")
        store.create(bucket)
        report = store.upload_dir(src, bucket)
    assert report.uploaded == 2
    assert sorted(o.key for o in store.list(bucket)) == ["kept.txt", "nested/.git/x"]


def test_the_source_itself_may_be_a_link_or_a_file(store: LocalStore, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real/a").write_text("a")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    bucket = BucketRef(store=StoreKind.LOCAL, name="via-link", prefix="p")
    store.create(bucket)
    store.upload_dir(tmp_path / "alias", bucket)
    store.upload_dir(tmp_path / "real/a", bucket.model_copy(update={"prefix": "single"}))
    assert sorted(o.key for o in store.list(bucket.model_copy(update={"prefix": ""}))) == [
        "p/a", "single/a"]


def test_writes_leave_no_part_files_and_delete_leaves_nothing(store: LocalStore,
                                                             tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for i in range(20):
        (tmp_path / f"src/f{i}").write_bytes(os.urandom(10_000))
    bucket = BucketRef(store=StoreKind.LOCAL, name="atomic")
    store.create(bucket)
    store.upload_dir(tmp_path / "src", bucket)
    on_disk = sorted(p.name for p in (store.root / "atomic").iterdir())
    assert on_disk == sorted(f"f{i}" for i in range(20))
    aside = store.root / ".deleting-atomic-cutshort"  # a delete killed after its rename
    aside.mkdir()
    assert store.delete(bucket) is True
    assert list(store.root.iterdir()) == []


def test_an_unreadable_source_is_named_and_not_retried(store: LocalStore,
                                                       tmp_path: Path) -> None:
    bucket = BucketRef(store=StoreKind.LOCAL, name="nosource")
    store.create(bucket)
    with pytest.raises(StorageError) as refused:
        store.upload_dir(tmp_path / "missing", bucket)
    assert (refused.value.code, refused.value.retryable) == ("SourceUnreadable", False)
    assert str(tmp_path / "missing") in str(refused.value)
