"""Managed jobs end to end: `orch jobs` with the dev server, a worker and real Ray on the
local cloud. A preemption here is real: the node's processes are killed and its sandbox
removed behind orch's back, as a cloud reclaiming a spot instance would."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.managed_jobs import ManagedJobStatus
from orch.runtime.local_processes import kill_marked, marked_pids
from tests.e2e.conftest import Orch, wait_for

pytestmark = pytest.mark.e2e
ENDED = tuple(status.value for status in ManagedJobStatus if status.is_terminal)


@pytest.fixture(autouse=True)
def no_job_left_running(orch: Orch) -> Iterator[None]:
    """A test that fails midway must not leave jobs (and their Ray clusters) behind."""
    yield
    if any(j["status"] not in ENDED for j in orch.json("jobs", "queue")):
        orch("jobs", "cancel", "--all", "-y")
        wait_for(lambda: all(j["status"] in ENDED for j in orch.json("jobs", "queue")), 120,
                 "every job to end")


def submit(orch: Orch, *args: str) -> int:
    out = orch("jobs", "launch", "-y", "-d", *args).stdout
    found = re.search(r"Managed job (\d+) submitted", out)
    assert found, out
    return int(found.group(1))


def job(orch: Orch, job_id: int) -> dict:
    return next(j for j in orch.json("jobs", "queue") if j["id"] == job_id)


def status_is(orch: Orch, job_id: int, *wanted: str) -> bool:
    status = job(orch, job_id)["status"]
    assert status != "FAILED_CONTROLLER"
    return status in wanted


def task_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_bad_spec_exits_2_and_starts_nothing(orch: Orch, tmp_path: Path) -> None:
    before = orch.json("jobs", "queue")
    bad = task_file(tmp_path, "bad.yaml",
                    "name: a\n---\nrun: echo\nresources:\n  cpu: 2\n")

    result = orch("jobs", "launch", "-y", bad, check=False)

    assert result.returncode == 2
    assert bad in result.stderr and "resources.cpu" in result.stderr
    assert "did you mean 'cpus'" in result.stderr and "Traceback" not in result.stderr
    assert orch.json("jobs", "queue") == before


def test_jobs_survive_a_worker_killed_with_sigkill_and_a_pipeline_runs_in_order(
    orch: Orch, tmp_path: Path,
) -> None:
    sleeper = submit(orch, "-n", "sleeper", "--cloud", "local", "sleep 15; echo slept")
    pipeline = submit(orch, "examples/pipeline.yaml")
    wait_for(lambda: status_is(orch, sleeper, "RUNNING"), 120, "the sleeper RUNNING")

    plane = orch.plane()
    state = plane.state()
    assert state is not None and state.worker_pid
    os.killpg(state.worker_pid, signal.SIGKILL)
    orch("server", "start")  # what any next command does: ControlPlane().ensure(), a new worker

    wait_for(lambda: all(status_is(orch, j, *ENDED) for j in (sleeper, pipeline)), 240,
             "both jobs to end")
    jobs = {j["id"]: j for j in orch.json("jobs", "queue")}
    assert jobs[sleeper]["status"] == jobs[pipeline]["status"] == "SUCCEEDED"
    assert (jobs[pipeline]["name"], jobs[pipeline]["task_index"],
            jobs[pipeline]["num_tasks"], jobs[pipeline]["recoveries"]) == ("demo-pipeline", 1, 2, 0)
    assert all(jobs[pipeline][key] for key in ("submitted_at", "started_at", "ended_at"))
    assert "slept" in orch("jobs", "logs", str(sleeper)).stdout
    output = orch("jobs", "logs", str(pipeline), "--no-follow").stdout
    assert output.index("prepared 10 numbers") < output.index("the total is 55")
    assert not orch.node_homes(f"job-{pipeline}-0") and not orch.node_homes(f"job-{sleeper}-0")
    names = [c["name"] for c in orch.json("status")]
    assert not [n for n in names if n.startswith((f"job-{sleeper}-", f"job-{pipeline}-"))]


def test_a_preempted_job_recovers_and_succeeds(orch: Orch, tmp_path: Path) -> None:
    marker = tmp_path / "checkpoint"
    spec = task_file(tmp_path, "resumable.yaml", f"""\
name: resumable
resources:
  cloud: local
run: |
  if [ -f {marker} ]; then echo "resumed from checkpoint"; exit 0; fi
  echo "started fresh"; touch {marker}; sleep 600
""")
    job_id = submit(orch, spec)
    cluster = f"job-{job_id}-0"
    wait_for(marker.exists, 120, "the job to start")
    assert any(c["name"] == cluster and c["job_id"] == str(job_id) for c in orch.json("status"))
    time.sleep(2)  # let the watch copy the first line of output

    for home in orch.node_homes(cluster):  # the cloud takes the machine back
        kill_marked(home)
        shutil.rmtree(home)

    wait_for(lambda: status_is(orch, job_id, "SUCCEEDED"), 180, "the job to recover")
    assert job(orch, job_id)["recoveries"] == 1
    controller = orch("jobs", "logs", str(job_id), "--controller").stdout
    assert "PREEMPTED: cluster " + cluster + " lost" in controller
    assert controller.count("LAUNCHED:") == 2
    output = orch("jobs", "logs", str(job_id), "--no-follow").stdout
    assert output.index("started fresh") < output.index("resumed from checkpoint")
    assert not orch.node_homes(cluster)


def test_cancel_from_the_cli_tears_the_cluster_down(orch: Orch, tmp_path: Path) -> None:
    job_id = submit(orch, "--cloud", "local", "echo up; sleep 600")
    cluster = f"job-{job_id}-0"
    wait_for(lambda: status_is(orch, job_id, "RUNNING"), 120, "the job RUNNING")
    homes = orch.node_homes(cluster)

    assert f"Cancelling managed job {job_id}." in orch("jobs", "cancel", "-y", str(job_id)).stdout

    wait_for(lambda: status_is(orch, job_id, "CANCELLED"), 60, "the job CANCELLED")
    # The job handed its cluster to the bulk teardown as it ended: gone seconds later.
    wait_for(lambda: not orch.node_homes(cluster), 60, "the cluster gone")
    assert all(marked_pids(home) == [] for home in homes)
    again = orch("jobs", "cancel", "-y", str(job_id)).stdout
    assert f"Managed job {job_id} already ended (CANCELLED)." in again
