"""The contract every store keeps, run against each one's real server (``conftest.store``):
create/exists/delete idempotently, upload a tree in parallel and skip what is unchanged,
resume an interrupted upload, list, and name its failures."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from orch.storage.base import BucketRef, ObjectInfo, Store, UploadProgress
from orch.storage.errors import BadName, NoSuchBucket
from tests.storage.conftest import PART_SIZE, new_bucket

BIG = PART_SIZE + 1024 * 1024  # over the multi-part threshold: two parts


def make_tree(root: Path, small_files: int = 3) -> dict[str, bytes]:
    """Nested directories, an empty file, a file over the multi-part threshold; returns
    relative path -> content."""
    contents = {
        "a.txt": b"alpha\n",
        "empty": b"",
        "sub/b.txt": b"bravo\n",
        "sub/deeper/c.bin": os.urandom(1024),
        "big.bin": os.urandom(BIG),
    }
    contents |= {f"many/f{i:03d}.txt": f"file {i}\n".encode() for i in range(small_files)}
    for relative, data in contents.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return contents


def expected(contents: dict[str, bytes], prefix: str = "") -> dict[str, tuple[int, str]]:
    lead = f"{prefix}/" if prefix else ""
    return {lead + k: (len(v), hashlib.md5(v).hexdigest()) for k, v in contents.items()}


def held(store: Store, bucket: BucketRef) -> dict[str, tuple[int, str | None]]:
    return {o.key: (o.size, o.md5) for o in store.list(bucket)}


@pytest.fixture
def bucket(store: Store) -> BucketRef:
    made = new_bucket(store)
    assert store.create(made) is True
    return made


def test_create_exists_delete_are_idempotent(store: Store) -> None:
    bucket = new_bucket(store)
    assert store.exists(bucket) is False
    assert store.create(bucket) is True
    assert store.exists(bucket) is True
    assert store.create(bucket) is False  # a retried create: ours, not an error
    assert store.delete(bucket) is True
    assert store.exists(bucket) is False
    assert store.delete(bucket) is False  # a retried delete


def test_upload_lists_every_file_with_its_size_and_md5(store: Store, bucket: BucketRef,
                                                       tmp_path: Path) -> None:
    contents = make_tree(tmp_path / "src")
    seen: list[UploadProgress] = []
    report = store.upload_dir(tmp_path / "src", bucket, seen.append)
    assert (report.uploaded, report.skipped) == (len(contents), 0)
    assert report.bytes_uploaded == sum(len(v) for v in contents.values())
    assert held(store, bucket) == expected(contents)
    assert seen[0].files_done == 0
    assert seen[-1].files_done == seen[-1].files_total == len(contents)
    assert seen[-1].bytes_done == seen[-1].bytes_total == report.bytes_uploaded
    assert [p.files_done for p in seen] == sorted(p.files_done for p in seen)


def test_upload_again_skips_unchanged_and_sends_a_changed_file(
        store: Store, bucket: BucketRef, tmp_path: Path) -> None:
    src = tmp_path / "src"
    contents = make_tree(src)
    store.upload_dir(src, bucket)
    again = store.upload_dir(src, bucket)
    assert (again.uploaded, again.skipped, again.bytes_uploaded) == (0, len(contents), 0)
    (src / "sub/b.txt").write_bytes(b"BRAVO\n")  # same size: only the hash tells
    contents["sub/b.txt"] = b"BRAVO\n"
    changed = store.upload_dir(src, bucket)
    assert (changed.uploaded, changed.skipped) == (1, len(contents) - 1)
    assert held(store, bucket) == expected(contents)


def test_an_interrupted_upload_resumes_and_completes(store: Store, bucket: BucketRef,
                                                     tmp_path: Path) -> None:
    src = tmp_path / "src"
    contents = make_tree(src, small_files=30)

    class Interrupted(Exception):
        pass

    def stop_after_five(progress: UploadProgress) -> None:
        if progress.files_done >= 5:
            raise Interrupted

    with pytest.raises(Interrupted):
        store.upload_dir(src, bucket, stop_after_five)
    partial = held(store, bucket)
    assert 5 <= len(partial) < len(contents)
    assert partial.items() <= expected(contents).items()  # whole objects only
    resumed = store.upload_dir(src, bucket)
    assert resumed.skipped == len(partial)
    assert resumed.uploaded == len(contents) - len(partial)
    assert held(store, bucket) == expected(contents)


def test_upload_under_a_prefix_and_list_only_it(store: Store, bucket: BucketRef,
                                                tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one/x.txt").write_bytes(b"x")
    (tmp_path / "two").mkdir()
    (tmp_path / "two/y.txt").write_bytes(b"yy")
    store.upload_dir(tmp_path / "one", bucket.model_copy(update={"prefix": "runs/1"}))
    store.upload_dir(tmp_path / "two", bucket.model_copy(update={"prefix": "runs/2/"}))
    listed = list(store.list(bucket.model_copy(update={"prefix": "runs/2"})))
    assert listed == [ObjectInfo(key="runs/2/y.txt", size=2, md5=hashlib.md5(b"yy").hexdigest())]
    assert set(held(store, bucket)) == {"runs/1/x.txt", "runs/2/y.txt"}


def test_delete_removes_a_bucket_with_objects(store: Store, bucket: BucketRef,
                                              tmp_path: Path) -> None:
    make_tree(tmp_path / "src")
    store.upload_dir(tmp_path / "src", bucket)
    assert store.delete(bucket) is True
    assert store.exists(bucket) is False


def test_a_missing_bucket_is_no_such_bucket(store: Store, tmp_path: Path) -> None:
    missing = new_bucket(store)
    (tmp_path / "f").write_bytes(b"f")
    with pytest.raises(NoSuchBucket) as listed:
        list(store.list(missing))
    with pytest.raises(NoSuchBucket) as uploaded:
        store.upload_dir(tmp_path, missing)
    for error in (listed.value, uploaded.value):
        assert missing.name in str(error)
        assert error.code and not error.retryable


def test_a_bad_name_is_refused_before_any_call(store: Store) -> None:
    bad = BucketRef(store=store.kind, name="Bad_Name!", account=getattr(
        store, "default_account", None))
    assert store.validate_name(bad.name)
    with pytest.raises(BadName) as refused:
        store.create(bad)
    assert "Bad_Name!" in str(refused.value) and "lowercase" in str(refused.value)
    assert store.validate_name(new_bucket(store).name) == []
