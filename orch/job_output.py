"""Jobs' output in the staging store (``orch.staging``), so that ``orch jobs logs``,
``orch logs`` and the output ``orch launch`` and ``orch exec`` follow are read from
there, not over SSH from the CLI's machine to a head (a laptop talking to remote workers
has no key for it), and not through workflow histories (an activity's result is
recorded there).

The worker's watch (``activities/managed_job.py``) copies a job's output from the head
to its own disk as it is written, and from there to the store every
:data:`FLUSH_EVERY_S` and before it returns: one object per flush, named by the byte
offset where it starts. A managed job's attempts, and a cluster's own jobs (named with
their submission time too: a cluster made again under the same name numbers its jobs
from 1 again)::

    <staging prefix>/output/jobs/<job id>/task-<i>.attempt-<n>/<offset, 16 digits>
    <staging prefix>/output/clusters/<name on cloud>/job-<id>-<submitted>/<offset, 16 digits>

A watch resumed on another worker starts its copy again from an earlier offset, so
objects may overlap; :class:`OutputReader` reads them in order of offset and skips bytes
it has given already, so each byte is shown once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from orch.contracts.watch import WatchRequest
from orch.managed_jobs import attempt_log_path
from orch.records import cluster_workflow_id
from orch.runtime.job_records import JobRecord
from orch.settings import load_settings
from orch.staging import staging_root
from orch.storage import get_store
from orch.storage.base import BucketRef, Store

FLUSH_EVERY_S = 2.0
JOB_OUTPUT_WORKFLOW = "JobOutputWorkflow"  # workflows/job_output.py
_OFFSET_DIGITS = 16


def _output(*parts: str, root: BucketRef | None = None) -> BucketRef:
    """``output/<parts>`` in the configured staging store (or ``root``)."""
    root = root or staging_root(load_settings().staging)
    prefix = "/".join(p for p in (root.prefix.strip("/"), "output", *parts) if p)
    return root.model_copy(update={"prefix": prefix})


def attempt_output(job_id: int, task_index: int, attempt: int,
                   root: BucketRef | None = None) -> BucketRef:
    """Where one attempt of a managed job's task keeps its output."""
    return _output("jobs", str(job_id), f"task-{task_index}.attempt-{attempt}", root=root)


def cluster_job_key(name_on_cloud: str, job: JobRecord) -> str:
    """What names a cluster's own job's output, for good."""
    return f"{name_on_cloud}/job-{job.id}-{job.submitted_at:%Y%m%dT%H%M%S%f}"


def cluster_job_output(key: str, root: BucketRef | None = None) -> BucketRef:
    """Where a cluster's own job keeps its output."""
    return _output("clusters", key, root=root)


def job_output_workflow_id(cluster: str, key: str) -> str:
    """The one copier of a cluster's own job's output (workflows/job_output.py)."""
    return f"{cluster_workflow_id(cluster)}/output/{key}"


def watched_output(request: WatchRequest, home: Path) -> tuple[Path, BucketRef]:
    """Where a watch keeps the job's output: its copy on the worker (under ``home``, the
    worker's ORCH_HOME) and its place in the store."""
    key = request.cluster_output_key
    if not key:
        return (attempt_log_path(home, request.job_id, request.task_index, request.attempt),
                attempt_output(request.job_id, request.task_index, request.attempt))
    return home / "cluster_output" / f"{key}.log", cluster_job_output(key)


def chunk_key(where: BucketRef, offset: int) -> str:
    return f"{where.prefix}/{offset:0{_OFFSET_DIGITS}d}"


def store_chunk(store: Store, where: BucketRef, offset: int, data: bytes) -> None:
    """Write the output bytes that start at ``offset``; the bucket is made if missing."""
    bucket = where.model_copy(update={"prefix": ""})
    if not store.exists(bucket):
        store.create(bucket)
    store.put(where, chunk_key(where, offset), data)


class OutputReader:
    """Reads one attempt's output from the store, a line at a time, each byte once."""

    def __init__(self, where: BucketRef, on_line: Callable[[str], None]):
        self.where = where
        self.on_line = on_line
        self.store = get_store(where.store)
        self.offset = 0  # bytes given so far
        self.partial = b""  # the last line, until its newline arrives

    def read_new(self) -> int:
        """Give the lines that arrived since the last call; returns how many bytes came
        (0 for an attempt with no output in the store yet)."""
        if not self.store.exists(self.where.model_copy(update={"prefix": ""})):
            return 0
        chunks = sorted((int(o.key.rsplit("/", 1)[-1]), o.key, o.size)
                        for o in self.store.list(self.where))
        before = self.offset
        for start, key, size in chunks:
            if start + size <= self.offset:
                continue
            data = self._read(key)
            self._give(data[max(0, self.offset - start):])
            self.offset = max(self.offset, start + len(data))
        return self.offset - before

    def _read(self, key: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="orch-output-") as tmp:
            target = Path(tmp) / "chunk"
            self.store.download(self.where, key, target)
            return target.read_bytes()

    def _give(self, data: bytes) -> None:
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self.on_line(line.decode(errors="replace"))

    def finish(self) -> None:
        """Give the last line, which has no newline."""
        if self.partial:
            self.on_line(self.partial.decode(errors="replace"))
            self.partial = b""
