"""The job table on a cluster's head node, and its command line (the records it keeps are
``orch.runtime.job_records``).

Run on the head through a command runner (``python -m orch.runtime.jobs ...``). Each job
is a directory ``~/.orch-node/jobs/<id>/`` holding ``job.json`` (its record), ``spec.json``
(what to run) and ``run.log`` (its output). Job output stays on the cluster; orch's
workflows only ever see job ids and statuses.

A task's secrets travel apart from the spec file the worker uploads (which holds none):
``submit`` reads them from its environment (``ORCH_JOB_SECRETS``, JSON, set by the submit
activity for this one command) and writes them into ``spec.json``, created 0600, the only
place they are stored on the node, for the driver to put in the user's environment.

The watch of every managed job runs ``poll`` on its head each time the job changes, so the
poll's path needs only the standard library: the records' pydantic models
(``orch.runtime.job_records``) are imported by the commands that write or validate records,
when they run. A poll costs about 40 ms of CPU instead of 130 ms (pydantic's import and
the models' schemas), on a real head as on the simulated ones, where every head shares
the benchmark's machine.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orch.runtime.procfs import alive
from orch.status import JobStatus

if TYPE_CHECKING:
    from orch.runtime.job_records import JobRecord, JobSpec

JOBS_PATH = ".orch-node/jobs"  # under the login user's home
JOBS_DIR = Path("~", JOBS_PATH).expanduser()
FOLLOW_POLL_S = 0.2
# Touched by every poll before it reads, and set this far in the past: a write in the same
# clock tick as the touch still counts as newer, so ``wait_then_poll`` never sleeps on it.
POLLED_MARK = ".polled"
POLLED_SLACK_NS = 20_000_000
WATCHER_GONE = 0  # wait_then_poll's exit code when its stdin closed (nobody reads the answer)
CANCEL_REQUESTED = "cancel-requested"  # in a job's directory: cancel() signalled its driver


def job_dir(job_id: int, root: Path = JOBS_DIR) -> Path:
    """Job ``job_id``'s directory in the table at ``root`` (this node's by default; another
    root is a simulated head's table, see ``orch.clouds.simulated_node``)."""
    return root / str(job_id)


def now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def locked(job_id: int, root: Path = JOBS_DIR) -> Iterator[Path]:
    """Serialise writers of one job's record (driver, cancel, status refresh)."""
    directory = job_dir(job_id, root)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield directory


def read(job_id: int, root: Path = JOBS_DIR) -> JobRecord | None:
    from orch.runtime.job_records import JobRecord  # not on the poll's path (docstring)

    path = job_dir(job_id, root) / "job.json"
    try:
        return JobRecord.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None


def write(record: JobRecord, root: Path = JOBS_DIR) -> None:
    path = job_dir(record.id, root) / "job.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json())
    tmp.replace(path)


def update(job_id: int, *, root: Path = JOBS_DIR, **changes: object) -> JobRecord | None:
    """Change a job unless it has already ended (an end is never overwritten)."""
    with locked(job_id, root):
        record = read(job_id, root)
        if record is None or record.status.is_terminal:
            return record
        record = record.model_copy(update=changes)
        write(record, root)
        return record


def refreshed(record: JobRecord) -> JobRecord:
    """A job whose driver died without recording its end is FAILED_DRIVER."""
    if record.status.is_terminal or record.driver_pid is None or alive(record.driver_pid):
        return record
    changed = update(record.id, status=JobStatus.FAILED_DRIVER, ended_at=now(),
                     message="the job's driver process exited without recording a result")
    return changed or record


def all_jobs() -> list[JobRecord]:
    if not JOBS_DIR.is_dir():
        return []
    ids = sorted(int(p.name) for p in JOBS_DIR.iterdir() if p.name.isdigit())
    return [refreshed(r) for r in (read(i) for i in ids) if r is not None]


def submit(spec: JobSpec) -> JobRecord:
    """Record the job and start its driver, detached. Submitting an id twice is a no-op."""
    from orch.runtime.job_records import JobRecord
    from orch.secret import reveal_context

    with locked(spec.id) as directory:
        existing = read(spec.id)
        if existing is not None:
            return existing
        _write_private(directory / "spec.json", spec.model_dump_json(context=reveal_context()))
        record = JobRecord(id=spec.id, name=spec.name, status=JobStatus.PENDING,
                           submitted_at=now())
        write(record)
        with open(directory / "run.log", "ab") as log:
            driver = subprocess.Popen(
                [sys.executable, "-m", "orch.runtime.driver", str(directory)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=str(directory),
            )
        record = record.model_copy(update={"driver_pid": driver.pid})
        write(record)
        return record


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by its owner only (it may hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def spec_to_submit(path: Path) -> JobSpec:
    """The uploaded spec, with the secrets ``submit`` got through its environment."""
    from orch.runtime.job_records import SECRETS_ENV, JobSpec

    spec = JobSpec.model_validate_json(path.read_text())
    given = os.environ.pop(SECRETS_ENV, None)
    if given:
        spec = JobSpec.model_validate({**spec.model_dump(), "secrets": json.loads(given)})
    return spec


def record_setup_failure(job_id: int, name: str | None, output: str) -> JobRecord:
    """A job whose setup failed: FAILED_SETUP, with the setup's last lines as its log."""
    from orch.runtime.job_records import JobRecord

    with locked(job_id) as directory:
        existing = read(job_id)
        if existing is not None:
            return existing
        (directory / "run.log").write_text(output + ("\n" if output else ""))
        stamp = now()
        record = JobRecord(id=job_id, name=name, status=JobStatus.FAILED_SETUP,
                           submitted_at=stamp, started_at=stamp, ended_at=stamp,
                           message="setup failed")
        write(record)
        return record


def record_signalled_end(job_id: int, root: Path = JOBS_DIR) -> None:
    """Record how a job whose driver got SIGTERM ended: CANCELLED when :func:`cancel` sent
    it; otherwise the machine is going away under the job (a preempted or stopped node's
    shutdown signals every process before its cloud reports the instance gone), which is
    no cancel: FAILED_DRIVER, which a managed job's watch checks against the cloud."""
    if (job_dir(job_id, root) / CANCEL_REQUESTED).exists():
        update(job_id, root=root, status=JobStatus.CANCELLED, ended_at=now())
    else:
        update(job_id, root=root, status=JobStatus.FAILED_DRIVER, ended_at=now(),
               message="the job's driver was terminated (SIGTERM) by the node")


def cancel(job_id: int) -> JobRecord | None:
    record = read(job_id)
    if record is None or record.status.is_terminal:
        return record
    if alive(record.driver_pid):
        assert record.driver_pid is not None
        (job_dir(job_id) / CANCEL_REQUESTED).touch()  # before the signal: see record_signalled_end
        # The driver cancels its Ray tasks, which kill the user's processes.
        os.killpg(record.driver_pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while alive(record.driver_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(record.driver_pid):
            os.killpg(record.driver_pid, signal.SIGKILL)
    return update(job_id, status=JobStatus.CANCELLED, ended_at=now()) or read(job_id)


def follow(job_id: int, follow_until_end: bool) -> JobRecord | None:
    """Print the job's log; with ``follow_until_end`` keep printing until it ends."""
    path = job_dir(job_id) / "run.log"
    record = read(job_id)
    if record is None:
        return None
    position = 0
    while True:
        record = refreshed(read(job_id) or record)
        try:
            with open(path, "rb") as handle:
                handle.seek(position)
                chunk = handle.read()
        except FileNotFoundError:
            chunk = b""
        # Only whole lines, unless the job is over.
        cut = len(chunk) if record.status.is_terminal else chunk.rfind(b"\n") + 1
        if cut:
            sys.stdout.buffer.write(chunk[:cut])
            sys.stdout.flush()
            position += cut
        if not follow_until_end or record.status.is_terminal:
            return record
        time.sleep(FOLLOW_POLL_S)


POLL_MAX_BYTES = 1 << 20


def poll(job_id: int, offset: int, max_bytes: int = POLL_MAX_BYTES) -> str:
    """The job's record, then its log from ``offset``, as the JSON of a
    ``job_records.JobPoll``: read in this order, a log read after a terminal record is
    complete. Marks the job polled first (see :func:`wait_then_poll_command`). The record
    is passed on as ``job.json`` holds it; only a job whose driver died unrecorded goes
    through :func:`refreshed` (and pydantic)."""
    _mark_polled(job_id)
    record = _read_raw(job_id)
    if record is not None and _driver_gone(record):
        from orch.runtime.job_records import JobRecord

        record = refreshed(JobRecord.model_validate(record)).model_dump(mode="json")
    try:
        with open(job_dir(job_id) / "run.log", "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(offset)
            chunk = handle.read(max_bytes)
    except FileNotFoundError:
        size, chunk = 0, b""
    end = offset + len(chunk)
    return json.dumps({"record": record, "offset": end,
                       "chunk_b64": base64.b64encode(chunk).decode(), "eof": end >= size})


def _read_raw(job_id: int) -> dict[str, Any] | None:
    """Job ``job_id``'s record as ``job.json`` holds it (written by :func:`write`)."""
    try:
        record: dict[str, Any] = json.loads((job_dir(job_id) / "job.json").read_text())
    except FileNotFoundError:
        return None
    return record


def _driver_gone(record: dict[str, Any]) -> bool:
    """:func:`refreshed` would change this record: it has not ended and its driver has."""
    pid = record.get("driver_pid")
    return not JobStatus(record["status"]).is_terminal and pid is not None and not alive(pid)


def _mark_polled(job_id: int) -> None:
    mark = job_dir(job_id) / POLLED_MARK
    if not mark.parent.is_dir():
        return
    mark.touch()
    stamp = time.time_ns() - POLLED_SLACK_NS
    os.utime(mark, ns=(stamp, stamp))


# Waits in bash, with builtins only (no process per second, a few hundred kB per waiting
# job), until the job's record or log is newer than its last poll, or its driver process is
# gone, for at most ``wait`` seconds; then runs the poll, or exits UNCHANGED_EXIT when
# nothing changed. ``read -t 1`` on the session's stdin is the sleep: it ends early at EOF,
# when the watcher closed the channel or lost the connection, and the wait ends with it.
_WAIT = """\
d="$HOME"/{jobs}/{job_id}
if [ -e "$d/{mark}" ]; then
  for ((i = 0; i < {wait}; i++)); do
    [[ "$d/job.json" -nt "$d/{mark}" || "$d/run.log" -nt "$d/{mark}" ]] && break
    read -r record < "$d/job.json" 2>/dev/null
    [[ $record =~ \\"driver_pid\\":([0-9]+) && ! -d /proc/${{BASH_REMATCH[1]}} ]] && break
    read -r -t 1 _
    (( $? > 128 )) || exit {gone}
  done
  (( i < {wait} )) || exit {unchanged}
fi
"""
UNCHANGED_EXIT = 3  # wait_then_poll_command: nothing changed while it waited


def wait_then_poll_command(python: str, job_id: int, offset: int, wait_s: int) -> str:
    """The head command of the managed-job watch's long poll: as soon as job ``job_id``
    changed (its record or its log, or its driver died) since its last poll, print
    :func:`poll` from ``offset`` as one JSON line; after ``wait_s`` seconds without a
    change, exit :data:`UNCHANGED_EXIT` having printed nothing. Its stdin must stay open
    while it waits: closing it ends the command. With ``wait_s`` 0, and for the first poll
    of a job, it polls at once."""
    wait = _WAIT.format(jobs=JOBS_PATH, job_id=job_id, mark=POLLED_MARK, wait=int(wait_s),
                        gone=WATCHER_GONE, unchanged=UNCHANGED_EXIT) if wait_s >= 1 else ""
    poll_now = f"exec {shlex.quote(python)} -m orch.runtime.jobs poll {job_id} --offset {offset}"
    return f"bash -c {shlex.quote(wait + poll_now)}"


def _print_json(value: object) -> None:
    print(json.dumps(value, default=str))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="orch-jobs")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("submit").add_argument("spec")
    failed = sub.add_parser("setup-failed")
    failed.add_argument("id", type=int)
    failed.add_argument("--name")
    failed.add_argument("--output-file", required=True)
    sub.add_parser("queue")
    logs = sub.add_parser("logs")
    logs.add_argument("id", type=int)
    logs.add_argument("--follow", action="store_true")
    poll_parser = sub.add_parser("poll")
    poll_parser.add_argument("id", type=int)
    poll_parser.add_argument("--offset", type=int, default=0)
    poll_parser.add_argument("--max-bytes", type=int, default=POLL_MAX_BYTES)
    cancel_parser = sub.add_parser("cancel")
    cancel_parser.add_argument("ids", type=int, nargs="*")
    cancel_parser.add_argument("--all", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "submit":
        _print_json(submit(spec_to_submit(Path(args.spec).expanduser())).model_dump(mode="json"))
    elif args.command == "setup-failed":
        output = Path(args.output_file).expanduser().read_text()
        _print_json(record_setup_failure(args.id, args.name, output).model_dump(mode="json"))
    elif args.command == "queue":
        _print_json([job.model_dump(mode="json") for job in all_jobs()])
    elif args.command == "logs":
        record = follow(args.id, args.follow)
        if record is None:
            raise SystemExit(f"no job {args.id} on this cluster")
    elif args.command == "poll":
        print(poll(args.id, args.offset, args.max_bytes))
    elif args.command == "cancel":
        ids = [j.id for j in all_jobs() if not j.status.is_terminal] if args.all else args.ids
        cancelled = [cancel(i) for i in ids]
        _print_json([r.model_dump(mode="json") for r in cancelled if r is not None])


if __name__ == "__main__":
    main()
