"""The head's ``python -m orch.runtime.jobs poll``, which every managed job's watch runs
each time its job changes: what it answers, and that it starts without pydantic."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from orch.runtime import jobs
from orch.runtime.job_records import JobPoll, JobRecord
from orch.status import JobStatus


def poll_on_head(home: Path, job_id: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The poll as the watch runs it on a head whose login user's home is ``home``."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orch.runtime.jobs", "poll", str(job_id),
         *args], capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "HOME": str(home)})


def job_on_head(home: Path, record: JobRecord, log: bytes) -> Path:
    root = home / jobs.JOBS_PATH
    jobs.job_dir(record.id, root).mkdir(parents=True)
    jobs.write(record, root)
    (jobs.job_dir(record.id, root) / "run.log").write_bytes(log)
    return root


def test_a_poll_answers_the_record_as_written_and_the_log_from_its_offset(
    tmp_path: Path,
) -> None:
    record = JobRecord(id=3, name="train", status=JobStatus.RUNNING,
                       submitted_at=datetime.now(UTC), started_at=datetime.now(UTC),
                       driver_pid=os.getpid(), message="é")
    job_on_head(tmp_path, record, b"epoch 1\n\xffepoch 2\n")

    answer = JobPoll.model_validate_json(poll_on_head(tmp_path, 3, "--offset", "8").stdout)

    assert answer.record == record
    assert answer.chunk == b"\xffepoch 2\n" and answer.offset == 17 and answer.eof
    cut = JobPoll.model_validate_json(
        poll_on_head(tmp_path, 3, "--offset", "8", "--max-bytes", "3").stdout)
    assert cut.chunk == b"\xffep" and cut.offset == 11 and not cut.eof
    assert JobPoll.model_validate_json(poll_on_head(tmp_path, 4).stdout).record is None


def test_a_poll_of_a_job_whose_driver_died_unrecorded_records_the_driver_failure(
    tmp_path: Path,
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    root = job_on_head(tmp_path, JobRecord(id=1, status=JobStatus.RUNNING,
                                           submitted_at=datetime.now(UTC),
                                           driver_pid=gone.pid), b"")

    answer = JobPoll.model_validate_json(poll_on_head(tmp_path, 1).stdout)

    assert answer.record is not None and answer.record.status == JobStatus.FAILED_DRIVER
    on_disk = jobs.read(1, root)
    assert on_disk is not None and on_disk.status == JobStatus.FAILED_DRIVER


def test_a_poll_of_a_running_job_imports_no_pydantic(tmp_path: Path) -> None:
    job_on_head(tmp_path, JobRecord(id=1, status=JobStatus.RUNNING,
                                    submitted_at=datetime.now(UTC)), b"hello\n")

    imported = poll_on_head(tmp_path, 1).stderr  # -X importtime: one line per module

    assert "import time:" in imported
    assert "pydantic" not in imported
