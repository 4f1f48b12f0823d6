"""The managed-job controller's eyes: watch one job on its cluster until it ends or the
cluster is lost.

One ``watch_job`` activity runs per job on a cluster, for as long as the job runs (hours
or days), and completes once: when the job ended, or when the cluster looks gone. So a
running job adds nothing to its workflow's history, whatever its length. The same watch
copies a cluster's own job's output for ``orch logs`` (``workflows/job_output.py``; its
places in ``orch.job_output.watched_output``).

It long-polls the head: one command (``orch.runtime.jobs.wait_then_poll_command``) waits
on the head until the job's record or log changes, or ``poll_interval_s`` passes (less a
random quarter, so that thousands of jobs started together do not poll in step), then
prints the job's record and the log bytes written since the last poll. So a job's end is
seen about a second after it happens, and a job that prints nothing costs one command per
``poll_interval_s``. The log bytes are appended to
``$ORCH_HOME/managed_jobs/<id>/task-<i>.attempt-<n>.log`` on the worker, so an attempt's
output outlives its cluster (``orch jobs logs`` shows it after a preemption). The
commands go over one SSH connection per head, held in the worker's event loop with every
other watch's (``orch.runtime.ssh_async``): no thread per job, per connection or per poll.

Preemption: when the head cannot be read, when the job ended other than SUCCEEDED
(``failure_grace_s`` later), and every
``instance_check_s`` (5 min) anyway, the cloud is asked (``query_instances``, in a thread:
cloud SDKs block) whether all the cluster's instances are still RUNNING; if not, the
result is CLUSTER_LOST. A head that stays unreadable for ``unreachable_limit_s`` while its
instances run is treated the same (the cluster is unusable). An unreadable head is asked
again after 1, 2, 4... s, up to ``poll_interval_s``.

A separate loop heartbeats every quarter of the heartbeat timeout (the SDK sends at most
one per 0.8 of it) even while a poll waits; the timeout is the workflow's trade-off
between what the heartbeats cost the server and how late a crashed worker's watches are
retried (``workflows/managed_job.py``). Its progress (log offset, since when the head
has been unreadable, the last instance check) is in the heartbeat details, so an attempt
retried after a worker died resumes where the last one stopped (from where this worker's
copy ends, if that is earlier: a retry on another machine copies the output from the
start while the head lives). It only reads, so running it twice is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ValidationError
from temporalio import activity

from activities.runtime import UNREACHABLE_AFTER_S
from orch.clouds import get_provider
from orch.clouds.base import InstanceStatus
from orch.clouds.errors import ProvisionError
from orch.config import orch_home
from orch.contracts.watch import WATCH_JOB, WatchOutcome, WatchRequest, WatchResult
from orch.job_output import FLUSH_EVERY_S, store_chunk, watched_output
from orch.runtime.commands import NodeUnreachableError
from orch.runtime.job_records import JobPoll
from orch.runtime.jobs import UNCHANGED_EXIT, wait_then_poll_command
from orch.runtime.ssh_async import run_on_node
from orch.status import JobStatus
from orch.storage import get_store
from orch.storage.base import BucketRef
from orch.storage.errors import StorageError

HEARTBEATS_PER_TIMEOUT = 4
FIRST_RETRY_GAP_S = 1.0  # an unreadable head is asked again after 1, 2, 4... s
POLL_JITTER = 0.25  # each long poll waits its interval less up to this fraction
POLL_GRACE_S = 60.0  # a poll's own time beyond its wait, before it is given up
# Cloud calls (query_instances) block: they run here, not on the event loop's default
# pool of cpus + 4 threads, which a wave of them would fill.
CLOUD_CHECK_THREADS = 16
_CLOUD_CHECKS = ThreadPoolExecutor(max_workers=CLOUD_CHECK_THREADS,
                                   thread_name_prefix="watch-cloud")


class WatchProgress(BaseModel):
    """The heartbeat details: what a retried attempt resumes from (wall-clock seconds)."""

    log_offset: int = 0
    stored_offset: int = 0  # how much of the copy is in the staging store (job_output)
    unreachable_since: float | None = None
    last_instance_check: float = 0.0


class _Unreadable(Exception):
    """The job's record could not be read from the head this time."""


async def _poll_head(request: WatchRequest, offset: int, wait_s: float) -> JobPoll | None:
    """The job's record and new output, once it changed or ``wait_s`` passed; None when
    nothing changed meanwhile."""
    head = request.head
    command = wait_then_poll_command(head.python, request.cluster_job_id, offset, int(wait_s))
    try:
        result = await run_on_node(head, command, timeout=wait_s + POLL_GRACE_S,
                                   connect_deadline=UNREACHABLE_AFTER_S)
    except NodeUnreachableError as exc:
        raise _Unreadable(str(exc)) from exc
    if result.returncode == UNCHANGED_EXIT:
        return None
    last = result.tail.splitlines()[-1] if result.tail else ""
    if not result.ok:
        raise _Unreadable(f"exit code {result.returncode}: {last}")
    try:
        return JobPoll.model_validate_json(last)
    except ValidationError as exc:
        raise _Unreadable(f"unexpected answer from the head: {last[:200]}") from exc


async def _ask_cloud(request: WatchRequest) -> str | None:
    """:func:`_cluster_lost` in a thread of its own pool."""
    return await asyncio.get_running_loop().run_in_executor(_CLOUD_CHECKS, _cluster_lost, request)


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


class Next(Enum):
    """What the watch does after a poll that did not end it."""

    NOW = "poll again at once"  # more log to copy
    WAIT = "long-poll"
    RETRY = "retry after a pause"  # the head could not be read


async def check_once(request: WatchRequest, progress: WatchProgress, log: Path,
                     wait_s: float) -> tuple[WatchResult | None, Next]:
    """One poll, waiting up to ``wait_s`` on the head for a change: (the result if the
    watch is over, what to do next)."""
    try:
        polled = await _poll_head(request, progress.log_offset, wait_s)
        if polled is not None and polled.record is None:
            raise _Unreadable(f"the head has no job {request.cluster_job_id}")
    except _Unreadable as exc:
        return await _head_unreadable(request, progress, str(exc), time.time()), Next.RETRY
    now = time.time()
    progress.unreachable_since = None
    if polled is None:  # the job did not change
        return await _instance_check(request, progress, now), Next.WAIT
    assert polled.record is not None
    if polled.chunk_b64:
        _append_log(log, progress.log_offset, polled.chunk)
    progress.log_offset = polled.offset
    status = polled.record.status
    if status.is_terminal:
        if not polled.eof:
            return None, Next.NOW  # copy the rest of the output first
        lost = await _lost_under(request, status)
        if lost:
            return WatchResult(outcome=WatchOutcome.CLUSTER_LOST,
                               detail=f"the job ended {status} and {lost}"), Next.NOW
        return WatchResult(outcome=WatchOutcome.JOB_ENDED, job_status=status), Next.NOW
    return await _instance_check(request, progress, now), Next.WAIT if polled.eof else Next.NOW


async def _lost_under(request: WatchRequest, status: JobStatus) -> str | None:
    """Why the cluster of a job that ended ``status`` is lost, or None. Any end but
    SUCCEEDED may be the cluster's (a node gone kills its ranks; a shutdown signals the
    driver), so the cloud is asked, ``failure_grace_s`` later."""
    if status == JobStatus.SUCCEEDED:
        return None
    await asyncio.sleep(request.failure_grace_s)
    return await _ask_cloud(request)


async def _instance_check(request: WatchRequest, progress: WatchProgress,
                          now: float) -> WatchResult | None:
    """Every ``instance_check_s``, whether the cloud still runs the whole cluster."""
    if now - progress.last_instance_check < request.instance_check_s:
        return None
    progress.last_instance_check = now
    lost = await _ask_cloud(request)
    return WatchResult(outcome=WatchOutcome.CLUSTER_LOST, detail=lost) if lost else None


async def _head_unreadable(request: WatchRequest, progress: WatchProgress, reason: str,
                           now: float) -> WatchResult | None:
    lost = await _ask_cloud(request)
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


class OutputCopy:
    """Copies the worker's copy of the output on to the staging store (orch.job_output),
    every FLUSH_EVERY_S and when the watch ends. A store that fails is logged and tried
    again at the next flush: the watch goes on (the worker's copy has the output)."""

    def __init__(self, log: Path, where: BucketRef):
        self.log = log
        self.where = where
        self.last = 0.0

    async def flush(self, progress: WatchProgress, final: bool) -> None:
        now = time.monotonic()
        if progress.stored_offset >= progress.log_offset or (
                not final and now - self.last < FLUSH_EVERY_S):
            return
        self.last = now
        start, end = progress.stored_offset, progress.log_offset
        try:
            await asyncio.get_running_loop().run_in_executor(
                _CLOUD_CHECKS, self._store, start, end)
        except (StorageError, OSError) as error:
            activity.logger.warning("output of %s not stored yet: %s", self.where.uri, error)
            return
        progress.stored_offset = end

    def _store(self, start: int, end: int) -> None:
        with open(self.log, "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start)
        store_chunk(get_store(self.where.store), self.where, start, data)


def _resumed_progress() -> WatchProgress:
    details = activity.info().heartbeat_details
    if details:
        with contextlib.suppress(ValidationError):
            return WatchProgress.model_validate(details[0])
    return WatchProgress()


def _long_poll_wait(request: WatchRequest) -> float:
    return request.poll_interval_s * (1 - random.uniform(0, POLL_JITTER))


@activity.defn(name=WATCH_JOB)
async def watch_job(request: WatchRequest) -> WatchResult:
    """Return when the job ended on its cluster or the cluster is lost (see the module)."""
    progress = _resumed_progress()
    log, where = watched_output(request, orch_home())
    # Resumed on a worker whose copy is shorter (another machine): copy what it lacks.
    progress.log_offset = min(progress.log_offset, log.stat().st_size if log.exists() else 0)
    progress.stored_offset = min(progress.stored_offset, progress.log_offset)
    output = OutputCopy(log, where)
    timeout = activity.info().heartbeat_timeout
    # Local calls (the SDK sends one RPC per 0.8 x the timeout at most); not beat_interval's
    # 5 s cap, which at 2,000 jobs is 400 calls a second for the same RPCs.
    every = timeout.total_seconds() / HEARTBEATS_PER_TIMEOUT if timeout else 15.0

    async def heartbeat() -> None:
        while True:
            activity.heartbeat(progress.model_dump(mode="json"))
            await asyncio.sleep(every)

    beating = asyncio.create_task(heartbeat())
    wait_s, gap = 0.0, FIRST_RETRY_GAP_S  # the first poll answers at once
    try:
        while True:
            result, then = await check_once(request, progress, log, wait_s)
            await output.flush(progress, final=result is not None)
            if result is not None:
                activity.heartbeat(progress.model_dump(mode="json"))
                return result
            wait_s = _long_poll_wait(request) if then is Next.WAIT else 0.0
            if then is Next.RETRY:
                await asyncio.sleep(gap)
                gap = min(gap * 2, request.poll_interval_s)
            else:
                gap = FIRST_RETRY_GAP_S
    finally:
        beating.cancel()
