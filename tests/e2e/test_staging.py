"""Files that reach a worker on another host (issue 9): the CLI stages a task's workdir
and file mounts in S3 (moto's server), and the only worker is a second ``python -m
workers`` with its own HOME and ORCH_HOME, its cwd elsewhere, in a mount namespace where
the CLI's directory is an empty tmpfs: it can reach the files through the staging store
only. A launch prints them; a managed job prints them, is preempted (its node taken back,
the worker's staging cache emptied) and prints them again after its recovery, and
``orch jobs logs`` shows both attempts' output from the staging store.

The embedded control plane's own worker is stopped for the test (so the other worker
runs everything) and started again after it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from orch.runtime.procfs import alive
from tests.e2e.conftest import Orch, wait_for
from tests.e2e.test_managed_jobs import job, submit, task_file
from tests.e2e.test_storage import take_back
from tests.storage.servers import MotoS3

UNSHARE = shutil.which("unshare")


def _can_hide_directories() -> bool:
    if UNSHARE is None:
        return False
    probe = subprocess.run([UNSHARE, "--mount", "--propagation", "private", "mount", "-t",
                            "tmpfs", "none", "/mnt"], capture_output=True)
    return probe.returncode == 0


pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not _can_hide_directories(), reason="needs unshare and mount (root) to hide a directory")]


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    server = MotoS3(tmp_path_factory.mktemp("moto"))
    yield server
    server.server.stop()


class OtherHost:
    """A worker process that shares nothing with the CLI but the Temporal server and the
    staging bucket; ``hidden`` is an empty directory to it."""

    def __init__(self, root: Path, address: str, env: dict[str, str], hidden: Path):
        self.home = root / "home"
        self.orch_home = self.home / ".orch"
        self.orch_home.mkdir(parents=True)
        hidden.mkdir(parents=True, exist_ok=True)  # the mount point, before the worker mounts
        worker_env = {**env, "HOME": str(self.home), "ORCH_HOME": str(self.orch_home),
                      "TEMPORAL_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
        script = (f"mount -t tmpfs none {hidden} && exec {sys.executable} -m workers "
                  f"--address {address}")
        self.log_path = root / "worker.log"
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(UNSHARE), "--mount", "--propagation", "private", "sh", "-c", script],
            env=worker_env, cwd=self.home, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def node_homes(self, cluster: str) -> list[Path]:
        return sorted(p for p in (self.orch_home / "local").glob(f"{cluster}-*/*") if p.is_dir())

    def log_tail(self, lines: int = 60) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=60)
        self.log.close()


@pytest.fixture
def other_host(orch: Orch, moto: MotoS3, tmp_path: Path) -> Iterator[tuple[Orch, OtherHost]]:
    state = orch.plane().state()
    assert state is not None and state.worker_pid
    os.kill(state.worker_pid, signal.SIGTERM)  # the embedded worker this session started
    wait_for(lambda: not alive(state.worker_pid), what="the embedded worker to exit")
    staging = {**moto.env, "ORCH_STAGING": "s3://orch-staging-e2e/runs"}
    laptop = Orch(tmp_path / "laptop")  # the CLI: its own home, the server by address
    laptop.env.update(staging, TEMPORAL_ADDRESS=state.address)
    worker_env = {k: v for k, v in os.environ.items()
                  if k not in ("ORCH_HOME", "TEMPORAL_ADDRESS")} | staging
    host = OtherHost(tmp_path / "other-host", state.address, worker_env,
                     hidden=tmp_path / "laptop-files")
    try:
        yield laptop, host
    finally:
        for cluster in laptop.json("status"):
            laptop("down", "-y", cluster["name"], check=False)
        host.stop()
        orch("server", "start")  # the embedded worker again, for the tests after


def laptop_task(tmp_path: Path, name: str, run_after: str = "") -> str:
    """A task whose workdir and file mount are in the directory the worker cannot see."""
    workdir = tmp_path / "laptop-files" / "project"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train.py").write_text("print('workdir file from the laptop')\n")
    data = tmp_path / "laptop-files" / "data.txt"
    data.write_text("file mount from the laptop\n")
    return task_file(tmp_path, name, f"""\
resources:
  cloud: local
workdir: {workdir}
file_mounts:
  ~/data.txt: {data}
run: |
  python train.py
  cat ~/data.txt
{run_after}""")


def stored(moto: MotoS3, prefix: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=moto.url, region_name=moto.region,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    listed = s3.list_objects_v2(Bucket="orch-staging-e2e", Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def saw_the_files(output: str) -> bool:
    return "workdir file from the laptop" in output and "file mount from the laptop" in output


# ~4 min alone; on a machine loaded by other suites its Ray starts alone took 9 min.
@pytest.mark.timeout(1200)
def test_a_worker_on_another_host_gets_the_files_of_a_launch_and_of_a_recovery(
    other_host: tuple[Orch, OtherHost], moto: MotoS3, tmp_path: Path,
) -> None:
    laptop, host = other_host
    launched = laptop("launch", "-y", "-c", "far", laptop_task(tmp_path, "task.yaml"),
                      timeout=600)
    assert saw_the_files(launched.stdout), launched.stdout
    assert "orch-staging-e2e/runs" in launched.stdout + launched.stderr  # where it staged
    # The output the launch followed, and `orch logs`, came from the staging store, where
    # the other host's worker copied it.
    assert stored(moto, "runs/output/clusters/far-"), "no cluster job output in the store"
    logs = laptop("logs", "far", "1", "--no-follow").stdout
    assert saw_the_files(logs), logs
    # The job table through the control plane (the cluster's jobs Update, read on the
    # worker), not from the laptop.
    assert [j["status"] for j in laptop.json("queue", "far")] == ["SUCCEEDED"]
    laptop("down", "-y", "far")

    job_id = submit(laptop, laptop_task(tmp_path, "job.yaml", "  echo ready\n  sleep 600\n"))
    cluster = f"job-{job_id}-0"

    def attempt_output(attempt: int) -> str:
        """The attempt's output once it printed ``ready``, else "" (the first attempt's
        output has no header while it is the only one)."""
        out = str(laptop("jobs", "logs", str(job_id), "--no-follow", check=False).stdout)
        header = f"attempt {attempt}"
        if attempt > 1:
            out = out[out.index(header):] if header in out else ""
        return out if "ready" in out else ""

    assert saw_the_files(wait_for(lambda: attempt_output(1), 300, "the first run"))
    shutil.rmtree(host.orch_home / "staging-cache")  # the recovery must fetch them again
    for home in host.node_homes(cluster):
        take_back(str(home))
    try:
        second = wait_for(lambda: attempt_output(2), 400, "the run after the recovery")
    except AssertionError as err:  # what the job went through, and the worker's last words
        raise AssertionError(f"{err}\njob: {job(laptop, job_id)}\n"
                             f"other host's worker:\n{host.log_tail()}") from None
    assert saw_the_files(second), second
    # The first attempt's output, from the staging store: its head is gone, and the
    # laptop never had a copy of its own.
    everything = laptop("jobs", "logs", str(job_id), "--no-follow").stdout
    first = everything[everything.index("attempt 1"):everything.index("attempt 2")]
    assert saw_the_files(first) and "ready" in first, everything
    assert not (laptop.home / "managed_jobs").exists()
    assert job(laptop, job_id)["recoveries"] == 1
    assert any((host.orch_home / "staging-cache").iterdir())  # fetched anew, on that host
    laptop("jobs", "cancel", "-y", str(job_id))
    wait_for(lambda: job(laptop, job_id)["status"] == "CANCELLED", 300, "the cancel")
