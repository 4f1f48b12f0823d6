"""The simulated cloud's heads (``orch.clouds.simulated``): what runs "on" them.

Two small scripts in the cloud's directory make one sshd serve every head:

* ``bin/head-shell``, sshd's ``ForceCommand``: picks the head by the address the client
  connected to (the third field of ``SSH_CONNECTION``), makes ``heads/<address>/`` its
  home and runs the client's command there (SFTP included, rooted in that home). A command
  that ran to its end also appends its start and end time to ``.sim-node-seconds`` in the
  home, so the benchmarks can tell the time spent on the node from orch's own; the watch's
  long polls, which only wait, are not logged.
* ``bin/python``, the heads' interpreter: orch's node-side modules run as on a real head
  (the job table and its ``poll``, exactly), except two that would need Ray: ``ray_node``
  (start prints a GCS address, stop and health succeed, in bash) and ``jobs submit``
  (``python -m orch.clouds.simulated_node SPEC``: the job is recorded RUNNING, with no
  driver; it ends when the benchmark says so, :func:`end_job`, or is cancelled).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from orch.runtime import jobs
from orch.runtime.job_records import JobRecord
from orch.status import JobStatus

SFTP_SERVER = "/usr/lib/openssh/sftp-server"
NODE_SECONDS = ".sim-node-seconds"

_HEAD_SHELL = """\
#!/bin/bash
# sshd ForceCommand of orch's simulated cloud: serve the head at the address dialled.
set -- $SSH_CONNECTION
HOME={heads}/$3
if ! cd "$HOME" 2>/dev/null; then
  echo "no simulated head at $3" >&2
  exit 255
fi
export HOME
case "$SSH_ORIGINAL_COMMAND" in
  internal-sftp|sftp) exec {sftp} -d "$HOME" ;;
  *"orch.runtime.jobs poll"*) exec /bin/bash -c "$SSH_ORIGINAL_COMMAND" ;;
esac
start=$EPOCHREALTIME
/bin/bash -c "$SSH_ORIGINAL_COMMAND"
rc=$?
echo "$start $EPOCHREALTIME" >> {seconds}
exit $rc
"""

# Ray is answered in bash: these run for every launch and teardown, and a Python start
# costs a tenth of a second of the machine that hosts every simulated node.
_PYTHON = """\
#!/bin/bash
# The simulated heads' interpreter: orch's node modules, Ray and the job driver simulated.
case "$1 $2 $3" in
  "-m orch.runtime.ray_node start")
    while [ $# -gt 0 ]; do [ "$1" = --ip ] && ip=$2; shift; done
    echo "{{\\"gcs_address\\": \\"$ip:6379\\"}}"
    exit 0 ;;
  "-m orch.runtime.ray_node stop"|"-m orch.runtime.ray_node health") exit 0 ;;
  "-m orch.runtime.jobs submit") exec {python} -m orch.clouds.simulated_node "$4" ;;
esac
exec {python} "$@"
"""


def write_head_files(root: Path, python: str = sys.executable) -> tuple[Path, Path]:
    """Write ``bin/head-shell`` and ``bin/python`` under ``root``; returns their paths."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shell, interpreter = bin_dir / "head-shell", bin_dir / "python"
    shell.write_text(_HEAD_SHELL.format(heads=shlex.quote(str(root / "heads")),
                                        sftp=SFTP_SERVER, seconds=f'"$HOME/{NODE_SECONDS}"'))
    interpreter.write_text(_PYTHON.format(python=shlex.quote(python)))
    for path in (shell, interpreter):
        path.chmod(0o755)
    return shell, interpreter


def node_seconds(home: Path) -> float:
    """Seconds commands ran on the head at ``home`` (long polls excepted)."""
    try:
        lines = (home / NODE_SECONDS).read_text().split("\n")
    except FileNotFoundError:
        return 0.0
    return sum(float(end) - float(start)
               for start, end in (line.split() for line in lines if line.strip()))


def end_job(home: Path, job_id: int, status: JobStatus) -> JobRecord | None:
    """End job ``job_id`` on the head at ``home`` (unless it already ended), with a last
    line in its log, as a job that ran to its end would."""
    root = home / jobs.JOBS_PATH
    log = jobs.job_dir(job_id, root) / "run.log"
    if log.parent.is_dir():
        with open(log, "a") as handle:
            handle.write(f"simulated job {job_id}: {status}\n")
    return jobs.update(job_id, root=root, status=status, ended_at=jobs.now())


def _submit(spec_path: str) -> None:
    spec = jobs.spec_to_submit(Path(spec_path).expanduser())
    with jobs.locked(spec.id) as directory:
        record = jobs.read(spec.id)
        if record is None:
            (directory / "run.log").write_text(f"simulated job {spec.id}: {spec.run}\n")
            stamp = jobs.now()
            record = JobRecord(id=spec.id, name=spec.name, status=JobStatus.RUNNING,
                               submitted_at=stamp, started_at=stamp)
            jobs.write(record)
    print(record.model_dump_json())


if __name__ == "__main__":
    _submit(sys.argv[1])
