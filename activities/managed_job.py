"""The managed-job controller's eyes: watch one job on its cluster until it ends or the
cluster is lost.

One ``watch_job`` activity runs per job on a cluster, for as long as the job runs (hours
or days), and completes once: when the job ended, or when the cluster looks gone. So a
running job adds nothing to its workflow's history, whatever its length. Every
``poll_interval_s`` (sooner at first, so that short jobs end soon) it runs one command on
the head (``python -m orch.runtime.jobs poll``) that returns the job's record and the log
bytes written since the last poll; those bytes are appended to
``$ORCH_HOME/managed_jobs/<id>/task-<i>.attempt-<n>.log`` on the worker, so an attempt's
output outlives its cluster (``orch jobs logs`` shows it after a preemption).

Preemption: when the head cannot be read, when the job failed, and every
``instance_check_s`` (5 min) anyway, the cloud is asked (``query_instances``) whether all
the cluster's instances are still RUNNING; if not, the result is CLUSTER_LOST. A head
that stays unreadable for ``unreachable_limit_s`` while its instances run is treated the
same (the cluster is unusable).

The activity is async and holds no thread between polls; a poll runs on a thread pool of
its own (``POLL_THREADS``, not the event loop's default pool of cpus + 4 threads, which a
wave of unreachable heads would fill, stalling every other job's watch), and gives up
connecting to a head after ``UNREACHABLE_AFTER_S``. A separate loop heartbeats every
15 seconds even while a poll hangs. Its progress (log offset, since when the head has
been unreadable, the last instance check) is in the heartbeat details, so an attempt
retried after a worker died resumes where the last one stopped (from where this worker's
copy ends, if that is earlier: a retry on another machine copies the output from the
start while the head lives). It only reads, so running it twice is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ValidationError
from temporalio import activity

from activities.runtime import UNREACHABLE_AFTER_S
from orch.clouds import get_provider
from orch.clouds.base import InstanceStatus
from orch.clouds.errors import ProvisionError
from orch.config import orch_home
from orch.contracts.watch import WATCH_JOB, WatchOutcome, WatchRequest, WatchResult
from orch.managed_jobs import RESTARTABLE, attempt_log_path
from orch.runtime.jobs import JobPoll
from orch.runtime.runner import NodeUnreachableError, runner_for

HEARTBEAT_EVERY_S = 15.0  # the SDK sends one per 48 s at most (0.8 x the 60 s timeout)
FIRST_POLL_GAP_S = 1.0
POLL_TIMEOUT_S = 60.0
POLL_THREADS = 64  # polls are short; 2,000 jobs polled every 30 s make ~67 a second
_POLLS = ThreadPoolExecutor(max_workers=POLL_THREADS, thread_name_prefix="watch-poll")


class WatchProgress(BaseModel):
    """The heartbeat details: what a retried attempt resumes from (wall-clock seconds)."""

    log_offset: int = 0
    unreachable_since: float | None = None
    last_instance_check: float = 0.0


class _Unreadable(Exception):
    """The job's record could not be read from the head this time."""


def _poll_head(request: WatchRequest, offset: int) -> JobPoll:
    head = request.head
    command = (f"{shlex.quote(head.python)} -m orch.runtime.jobs poll "
               f"{request.cluster_job_id} --offset {offset}")
    try:
        with runner_for(head, connect_deadline=UNREACHABLE_AFTER_S) as runner:
            result = runner.run(command, timeout=POLL_TIMEOUT_S)
    except NodeUnreachableError as exc:
        raise _Unreadable(str(exc)) from exc
    last = result.tail.splitlines()[-1] if result.tail else ""
    if not result.ok:
        raise _Unreadable(f"exit code {result.returncode}: {last}")
    try:
        return JobPoll.model_validate_json(last)
    except ValidationError as exc:
        raise _Unreadable(f"unexpected answer from the head: {last[:200]}") from exc


def _cluster_lost(request: WatchRequest) -> str | None:
    """Why the cluster is no longer whole per its cloud, or None (also when the cloud
    could not be asked: no verdict without an answer)."""
    try:
        states = get_provider(request.cloud).query_instances(
            request.region, request.name_on_cloud or request.cluster_name)
    except ProvisionError as exc:
        activity.logger.info("query_instances of %s failed: %s", request.cluster_name, exc)
        return None
    missing = request.num_nodes - len(states)
    stopped = sorted(f"{i} {s}" for i, s in states.items() if s != InstanceStatus.RUNNING)
    if missing <= 0 and not stopped:
        return None
    parts = ([f"{missing} of {request.num_nodes} instance(s) gone"] if missing > 0 else [])
    return ", ".join(parts + stopped)


def _append_log(path: Path, offset: int, chunk: bytes) -> None:
    """Write ``chunk`` at ``offset`` of the saved copy (a retried attempt may have written
    past the offset it last reported; that tail is written again)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        if handle.tell() > offset:
            handle.truncate(offset)
        handle.write(chunk)


def check_once(request: WatchRequest, progress: WatchProgress, log: Path
               ) -> tuple[WatchResult | None, bool]:
    """One poll: (the result if the watch is over, whether to poll again at once)."""
    now = time.time()
    try:
        polled = _poll_head(request, progress.log_offset)
        if polled.record is None:
            raise _Unreadable(f"the head has no job {request.cluster_job_id}")
    except _Unreadable as exc:
        return _head_unreadable(request, progress, str(exc), now), False
    if polled.chunk_b64:
        _append_log(log, progress.log_offset, polled.chunk)
    progress.log_offset = polled.offset
    progress.unreachable_since = None
    status = polled.record.status
    if status.is_terminal:
        if not polled.eof:
            return None, True  # copy the rest of the output first
        lost = _cluster_lost(request) if status in RESTARTABLE else None
        if lost:
            return WatchResult(outcome=WatchOutcome.CLUSTER_LOST,
                               detail=f"the job ended {status} and {lost}"), False
        return WatchResult(outcome=WatchOutcome.JOB_ENDED, job_status=status), False
    if now - progress.last_instance_check >= request.instance_check_s:
        progress.last_instance_check = now
        lost = _cluster_lost(request)
        if lost:
            return WatchResult(outcome=WatchOutcome.CLUSTER_LOST, detail=lost), False
    return None, not polled.eof


def _head_unreadable(request: WatchRequest, progress: WatchProgress, reason: str,
                     now: float) -> WatchResult | None:
    lost = _cluster_lost(request)
    progress.last_instance_check = now
    if lost:
        return WatchResult(outcome=WatchOutcome.CLUSTER_LOST, detail=f"{lost} ({reason})")
    if progress.unreachable_since is None:
        progress.unreachable_since = now
    elif now - progress.unreachable_since >= request.unreachable_limit_s:
        waited = now - progress.unreachable_since
        return WatchResult(
            outcome=WatchOutcome.CLUSTER_LOST,
            detail=f"the head has not answered for {waited:.0f} s although its instances "
                   f"run ({reason})",
        )
    activity.logger.info("job %s on %s unreadable: %s", request.cluster_job_id,
                         request.cluster_name, reason)
    return None


def _resumed_progress() -> WatchProgress:
    details = activity.info().heartbeat_details
    if details:
        with contextlib.suppress(ValidationError):
            return WatchProgress.model_validate(details[0])
    return WatchProgress()


@activity.defn(name=WATCH_JOB)
async def watch_job(request: WatchRequest) -> WatchResult:
    """Return when the job ended on its cluster or the cluster is lost (see the module)."""
    progress = _resumed_progress()
    log = attempt_log_path(orch_home(), request.job_id, request.task_index, request.attempt)
    # Resumed on a worker whose copy is shorter (another machine): copy what it lacks.
    progress.log_offset = min(progress.log_offset, log.stat().st_size if log.exists() else 0)

    async def heartbeat() -> None:
        while True:
            activity.heartbeat(progress.model_dump(mode="json"))
            await asyncio.sleep(HEARTBEAT_EVERY_S)

    beating = asyncio.create_task(heartbeat())
    gap = min(FIRST_POLL_GAP_S, request.poll_interval_s)  # 1, 2, 4... s up to the interval
    try:
        while True:
            result, again = await asyncio.get_running_loop().run_in_executor(
                _POLLS, check_once, request, progress, log
            )
            if result is not None:
                activity.heartbeat(progress.model_dump(mode="json"))
                return result
            if not again:
                await asyncio.sleep(gap)
                gap = min(gap * 2, request.poll_interval_s)
    finally:
        beating.cancel()
