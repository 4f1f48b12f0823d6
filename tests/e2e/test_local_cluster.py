"""The README's walk-through, and what must hold around it, on the local cloud."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from orch.runtime.local_processes import marked_pids
from orch.runtime.procfs import alive
from tests.e2e.conftest import Orch, wait_for

pytestmark = pytest.mark.e2e


def cluster_status(orch: Orch, name: str) -> dict | None:
    return next((c for c in orch.json("status") if c["name"] == name), None)


def test_hello_walkthrough(orch: Orch) -> None:
    launched = orch("launch", "-c", "hello", "examples/hello.yaml")
    out = launched.stdout
    homes = orch.node_homes("hello")
    assert len(homes) == 2
    ips = [Path(h, "node.json").read_text().split('"ip": "')[1].split('"')[0] for h in homes]
    for rank, ip in enumerate(ips):
        assert f"hello from rank {rank} of 2 at {ip}" in out
    assert out.count("this file came with the workdir") == 2
    assert "Job 1 on hello: SUCCEEDED" in out

    status = wait_for(lambda: cluster_status(orch, "hello"), what="hello in status")
    assert status is not None
    assert (status["status"], status["cloud"], status["num_nodes"]) == ("UP", "local", 2)
    assert "2x local" in orch("status").stdout

    again = orch("exec", "hello", "echo again from $ORCH_NODE_RANK")
    assert "again from 0" in again.stdout

    jobs = orch.json("queue", "hello")
    assert [(j["id"], j["name"], j["status"]) for j in jobs] == [
        (1, "hello", "SUCCEEDED"), (2, None, "SUCCEEDED")]
    assert all(j["submitted_at"] and j["duration_s"] is not None for j in jobs)

    logs = orch("logs", "hello", "1", "--no-follow")
    assert "this file came with the workdir" in logs.stdout

    orch("down", "-y", "hello")
    assert cluster_status(orch, "hello") is None
    assert orch.node_homes("hello") == []
    assert all(marked_pids(home) == [] for home in homes)


def test_a_long_job_is_cancelled_and_its_processes_killed(orch: Orch) -> None:
    orch("launch", "-c", "sleepy", "--cpus", "1", "echo up")
    submitted = orch("exec", "-d", "sleepy", "echo started; sleep 600; echo never")
    assert "Job 2 submitted" in submitted.stdout
    wait_for(lambda: orch.json("queue", "sleepy")[-1]["status"] == "RUNNING", what="RUNNING")
    home = orch.node_homes("sleepy")[0]
    wait_for(lambda: any(b"sleep\x00600" in Path(f"/proc/{p}/cmdline").read_bytes()
                         for p in marked_pids(home) if Path(f"/proc/{p}").exists()),
             what="the job's sleep")

    cancelled = orch("cancel", "-y", "sleepy", "2")
    assert "Job 2: CANCELLED" in cancelled.stdout
    assert orch.json("queue", "sleepy")[-1]["status"] == "CANCELLED"

    def sleep_gone() -> bool:
        return not any(b"sleep\x00600" in Path(f"/proc/{p}/cmdline").read_bytes()
                       for p in marked_pids(home) if Path(f"/proc/{p}").exists())

    wait_for(sleep_gone, timeout=20, what="the sleep to be killed")
    logs = orch("logs", "sleepy", "2", check=False)
    assert logs.returncode == 1 and "started" in logs.stdout and "never" not in logs.stdout
    orch("down", "-y", "sleepy")


def test_two_clusters_and_down_of_one_leaves_the_other_running(orch: Orch) -> None:
    orch("launch", "-c", "first", "echo one")
    orch("launch", "-c", "second", "--num-nodes", "2", "echo two")
    first_homes, second_homes = orch.node_homes("first"), orch.node_homes("second")
    assert all(marked_pids(h) for h in first_homes + second_homes)  # Ray runs on every node

    orch("down", "-y", "first")

    assert all(marked_pids(h) == [] for h in first_homes)
    assert all(marked_pids(h) for h in second_homes)
    result = orch("exec", "second", "--num-nodes", "2", "echo still $ORCH_NODE_RANK")
    assert "still 0" in result.stdout and "still 1" in result.stdout
    # A one-node job on a multi-node cluster runs on the head, every time.
    head_ip = json.loads(Path(second_homes[0], "node.json").read_text())["ip"]
    for _ in range(4):
        assert f"on {head_ip} as 0" in orch("exec", "second", "echo on $ORCH_NODE_IPS as "
                                         "$ORCH_NODE_RANK").stdout
    orch("down", "-y", "second")


def test_setup_failure_reports_the_tail_and_keeps_the_cluster_up(orch: Orch, tmp_path: Path
                                                                  ) -> None:
    task = tmp_path / "broken.yaml"
    task.write_text("setup: |\n  echo preparing\n  echo 'no such package' >&2\n  exit 3\n"
                    "run: echo never\n")
    result = orch("launch", "-c", "broken", str(task), check=False)
    assert result.returncode != 0
    assert "setup failed" in result.stderr and "no such package" in result.stderr
    broken = cluster_status(orch, "broken")
    assert broken is not None and broken["status"] == "UP"
    assert orch.json("queue", "broken")[0]["status"] == "FAILED_SETUP"
    orch("down", "-y", "broken")


def test_bad_input_is_refused_with_a_clear_error_and_nothing_launched(
    orch: Orch, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  cpu: 2\nrun: echo\n")
    result = orch("launch", "-c", "never", str(bad), check=False)
    assert result.returncode == 2
    assert str(bad) in result.stderr and "did you mean 'cpus'" in result.stderr
    assert "Traceback" not in result.stderr

    gpu = orch("launch", "-c", "never", "--gpus", "A100:1", "--cloud", "local", "echo",
               check=False)
    assert gpu.returncode == 2 and "no GPUs" in gpu.stderr
    assert cluster_status(orch, "never") is None
    assert not (orch.home / "local" / orch.cloud_name("never")).exists()


def test_down_of_a_cluster_that_does_not_exist(orch: Orch) -> None:
    result = orch("down", "-y", "ghost", check=False)
    assert result.returncode == 2 and "cluster ghost does not exist" in result.stderr


def test_a_worker_killed_during_launch_is_replaced_and_the_launch_completes(orch: Orch) -> None:
    launch = orch.popen("launch", "-c", "phoenix", "--num-nodes", "2", "-d", "echo risen")
    plane = orch.plane()
    # Kill the worker while Ray is starting on the nodes (an activity in flight).
    wait_for(lambda: any(marked_pids(h) for h in orch.node_homes("phoenix")), timeout=120,
             what="Ray starting on phoenix")
    state = plane.state()
    assert state is not None and state.worker_pid
    os.killpg(state.worker_pid, signal.SIGKILL)
    wait_for(lambda: not alive(state.worker_pid), timeout=10, what="the worker to die")
    plane.ensure()  # what any next command does: a new worker

    output, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, output
    assert "Job 1 submitted" in output
    assert len(orch.node_homes("phoenix")) == 2  # nothing provisioned twice
    assert orch("logs", "phoenix", "1").stdout.strip().endswith("risen") or \
        "risen" in orch("logs", "phoenix", "1").stdout
    orch("down", "-y", "phoenix")
