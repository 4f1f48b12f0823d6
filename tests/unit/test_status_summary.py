"""The one line `orch status` prints about managed jobs, as `sky status` does."""

from __future__ import annotations

from datetime import UTC, datetime

from cli.display import queue_summary
from orch.managed_jobs import JobSummary, ManagedJobStatus, ScheduleState

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def jobs(*statuses: ManagedJobStatus) -> list[JobSummary]:
    return [JobSummary(id=i, status=s, schedule_state=ScheduleState.ALIVE, task_index=0,
                       num_tasks=1, submitted_at=NOW) for i, s in enumerate(statuses, 1)]


def test_counts_each_status_in_progress_first_running_before_waiting() -> None:
    S = ManagedJobStatus
    line = queue_summary(jobs(S.SUCCEEDED, S.PENDING, S.RUNNING, S.SUCCEEDED, S.FAILED,
                              S.RUNNING, S.CANCELLING, S.SUCCEEDED))
    assert line == ("Managed jobs: 2 RUNNING, 1 PENDING, 1 CANCELLING, 3 SUCCEEDED, "
                    "1 FAILED — orch jobs queue for details")


def test_no_jobs_says_so() -> None:
    assert queue_summary([]).startswith("Managed jobs: none")
