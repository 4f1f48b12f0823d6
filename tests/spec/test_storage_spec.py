"""SkyPilot's bucket file_mounts, parsed: each form, SkyPilot's defaults, ${VAR} from envs,
the name rules of every store a bucket may land on, and where a bucket of a launch lives
(``resolve_mounts``). Bad input through the real CLI is in test_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.contracts.storage import resolve_mounts
from orch.spec import SpecError, Task, parse_task
from orch.spec_storage import StorageMode, StorageMount
from orch.storage.base import BucketRef, StoreKind


def problems(data: dict, base: Path | None = None) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_task({**data, "run": "x"}, "t.yaml", base)
    return dict(caught.value.problems)


def test_every_form_with_skypilots_defaults(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "notes.txt").write_text("n")
    task = parse_task({"file_mounts": {
        "/datasets": "s3://corpus/train",
        "/az": "https://acct1.blob.core.windows.net/box/pre",
        "/mounted": {"source": "gs://corpus", "mode": "mount"},
        "~/ckpt": {"name": "my-ckpt"},
        "/up": {"name": "up-data", "source": "data", "persistent": False,
                "mode": "mount_cached", "store": "GCS"},
        "/two": {"name": "two-data", "source": ["data", "notes.txt"], "mode": "COPY"},
        "/local/file": "notes.txt",
    }, "run": "x"}, "t.yaml", tmp_path)

    assert task.file_mounts == {"/local/file": str(tmp_path / "notes.txt")}
    mounts = task.storage_mounts
    assert mounts["/datasets"].mode == StorageMode.COPY  # a URI alone: SkyPilot copies it
    assert mounts["/datasets"].bucket_uri == BucketRef(store=StoreKind.S3, name="corpus",
                                                       prefix="train")
    assert mounts["/az"].bucket_uri == BucketRef(store=StoreKind.AZURE, name="box",
                                                 account="acct1", prefix="pre")
    assert mounts["/mounted"].mode == StorageMode.MOUNT
    ckpt = mounts["~/ckpt"]
    assert (ckpt.mode, ckpt.persistent, ckpt.store, ckpt.source) == (
        StorageMode.MOUNT, True, None, None)
    up = mounts["/up"]
    assert (up.mode, up.persistent, up.store) == (StorageMode.MOUNT_CACHED, False,
                                                  StoreKind.GCS)
    assert up.local_sources == [str(tmp_path / "data")]
    assert mounts["/two"].local_sources == [str(tmp_path / "data"), str(tmp_path / "notes.txt")]
    assert Task.model_validate(task.model_dump()) == task  # as workflows carry it


def test_envs_fill_bucket_names_sources_and_paths(tmp_path: Path) -> None:
    (tmp_path / "run-7").mkdir()
    task = parse_task({"envs": {"RUN": "7", "BUCKET": "ckpt-7"}, "file_mounts": {
        "/ckpt/${RUN}": {"name": "${BUCKET}", "source": "run-$RUN"},
        "/data": "local://corpus-${RUN}/x"}, "run": "x"}, "t.yaml", tmp_path,
        envs={"RUN": "7"})
    assert task.storage_mounts["/ckpt/7"].name == "ckpt-7"
    assert task.storage_mounts["/ckpt/7"].source == str(tmp_path / "run-7")
    assert task.storage_mounts["/data"].source == "local://corpus-7/x"


def test_mount_paths_and_local_sources_are_checked(tmp_path: Path) -> None:
    found = problems({"file_mounts": {"data": {"name": "b-one"},
                                      "/x": {"name": "b-two", "source": "nope"}}}, tmp_path)
    assert found["file_mounts.data"] == "a mount path is absolute or starts with ~/"
    assert found["file_mounts./x.source"].endswith("nope does not exist")


def test_a_bucket_with_no_store_meets_every_store_the_task_may_land_on() -> None:
    dotted = {"file_mounts": {"/c": {"name": "my.ckpt"}}}
    anywhere = problems(dotted)["file_mounts./c.name"]
    assert "not a valid azure bucket name" in anywhere and "may run on azure" in anywhere
    assert parse_task({**dotted, "resources": {"cloud": "aws"}, "run": "x"}, "t")
    assert parse_task({**dotted, "resources": {"any_of": [{"cloud": "aws"}, {"cloud": "gcp"}]},
                       "run": "x"}, "t")
    assert "azure" in problems({**dotted, "resources": {"any_of": [{"cloud": "aws"},
                                                                   {"cloud": "azure"}]}})[
        "file_mounts./c.name"]
    assert parse_task({"file_mounts": {"/c": {"name": "my.ckpt", "store": "s3"}},
                       "run": "x"}, "t")


def test_a_uri_names_its_own_store_and_a_store_must_agree() -> None:
    assert "'Bad_Bucket' is not a valid gcs bucket name" in problems(
        {"file_mounts": {"/d": "gs://Bad_Bucket/x"}})["file_mounts./d.source"]
    assert problems({"file_mounts": {"/d": {"source": "s3://b-ok", "store": "gcs"}}})[
        "file_mounts./d"] == "store gcs disagrees with the source s3://b-ok"
    assert "holds local paths only" in problems(
        {"file_mounts": {"/d": {"name": "b-ok", "source": ["a", "s3://b"]}}})[
        "file_mounts./d.source"]


def test_storage_mounts_is_not_a_yaml_field() -> None:
    assert problems({"storage_mounts": {}}) == {
        "storage_mounts": "unknown field; buckets are written in file_mounts"}


def test_a_launch_puts_a_bucket_on_its_clusters_cloud_unless_pinned_or_given() -> None:
    mounts = {"/c": StorageMount(name="ckpt-1"),
              "/g": StorageMount(name="g-1", store=StoreKind.GCS),
              "/u": StorageMount(source="s3://corpus/x", mode=StorageMode.COPY)}
    on_aws = {m.path: m for m in resolve_mounts(mounts, "aws", "us-west-2", [])}
    assert on_aws["/c"].bucket == BucketRef(store=StoreKind.S3, name="ckpt-1",
                                            region="us-west-2")
    assert on_aws["/c"].recorded and on_aws["/c"].persistent
    assert on_aws["/g"].bucket == BucketRef(store=StoreKind.GCS, name="g-1")
    assert not on_aws["/u"].recorded  # a URI's bucket: never created nor deleted
    on_local = {m.path: m for m in resolve_mounts(mounts, "local", "local", [])}
    assert on_local["/c"].bucket == BucketRef(store=StoreKind.LOCAL, name="ckpt-1")
    # A recovery on another cloud keeps the bucket its job started with.
    pinned = resolve_mounts(mounts, "gcp", "us-central1", [on_aws["/c"].bucket])
    assert pinned[0].bucket == on_aws["/c"].bucket
