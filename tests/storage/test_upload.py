"""The shared upload loop, with a put of the test's own: progress while a large file is
in flight, and a failure that stops what has not started."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from orch.storage.base import ObjectInfo, UploadProgress
from orch.storage.upload import LocalFile, file_md5, local_files, upload_files


def files(root: Path, count: int) -> list[LocalFile]:
    root.mkdir()
    for i in range(count):
        (root / f"f{i:02d}").write_text(f"file {i}")
    return local_files(root, "pre")


def test_progress_goes_on_while_a_file_is_in_flight(tmp_path: Path) -> None:
    release = threading.Event()
    seen: list[UploadProgress] = []

    def progress(p: UploadProgress) -> None:
        seen.append(p)
        if len(seen) >= 4:  # three beats after the first, with nothing done yet
            release.set()

    def slow_put(file: LocalFile, md5: bytes) -> None:
        assert release.wait(timeout=30)

    report = upload_files(files(tmp_path / "src", 1), [], slow_put, progress,
                          progress_interval=0.01)
    assert [p.files_done for p in seen[:4]] == [0, 0, 0, 0]
    assert seen[-1].files_done == 1 and report.uploaded == 1


def test_a_failed_put_stops_the_files_not_started(tmp_path: Path) -> None:
    started: list[str] = []

    def failing_put(file: LocalFile, md5: bytes) -> None:
        started.append(file.key)
        if len(started) == 3:
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        upload_files(files(tmp_path / "src", 10), [], failing_put, workers=1)
    assert started == ["pre/f00", "pre/f01", "pre/f02"]


def test_only_size_and_md5_together_skip_a_file(tmp_path: Path) -> None:
    batch = files(tmp_path / "src", 3)
    same, other_md5, other_size = batch
    held = [ObjectInfo(key=same.key, size=same.size, md5=file_md5(same.path).hex()),
            ObjectInfo(key=other_md5.key, size=other_md5.size, md5="0" * 32),
            ObjectInfo(key=other_size.key, size=other_size.size + 1,
                       md5=file_md5(other_size.path).hex())]
    put: list[str] = []
    report = upload_files(batch, held, lambda f, _: put.append(f.key))
    assert sorted(put) == [other_md5.key, other_size.key]
    assert (report.uploaded, report.skipped) == (2, 1)
