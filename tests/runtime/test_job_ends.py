"""How a job whose driver got SIGTERM is recorded on its node: a cancel is CANCELLED, a
signal from the node's shutdown (a preemption, a stop) is FAILED_DRIVER, which a managed
job's watch checks against the cloud instead of taking it for the user's cancel."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from orch.runtime import jobs
from orch.runtime.job_records import JobRecord
from orch.status import JobStatus


def running_job(root: Path) -> int:
    jobs.job_dir(1, root).mkdir(parents=True)
    jobs.write(JobRecord(id=1, status=JobStatus.RUNNING, submitted_at=datetime.now(UTC)), root)
    return 1


def test_a_driver_signalled_by_a_cancel_records_cancelled(tmp_path: Path) -> None:
    job_id = running_job(tmp_path)
    (jobs.job_dir(job_id, tmp_path) / jobs.CANCEL_REQUESTED).touch()

    jobs.record_signalled_end(job_id, tmp_path)

    record = jobs.read(job_id, tmp_path)
    assert record is not None and record.status == JobStatus.CANCELLED and record.ended_at


def test_a_driver_signalled_by_its_nodes_shutdown_records_a_driver_failure(
    tmp_path: Path,
) -> None:
    job_id = running_job(tmp_path)

    jobs.record_signalled_end(job_id, tmp_path)

    record = jobs.read(job_id, tmp_path)
    assert record is not None and record.status == JobStatus.FAILED_DRIVER
    assert record.message is not None and "SIGTERM" in record.message


def test_an_end_already_recorded_is_kept(tmp_path: Path) -> None:
    job_id = running_job(tmp_path)
    jobs.update(job_id, root=tmp_path, status=JobStatus.SUCCEEDED)

    jobs.record_signalled_end(job_id, tmp_path)

    record = jobs.read(job_id, tmp_path)
    assert record is not None and record.status == JobStatus.SUCCEEDED
