"""`orch launch` rides out a control plane that dies and comes back mid-launch: it says
so, keeps following, and reports the launch's real outcome (issue 12, part 7); and a
worker SIGKILLed while the launch follows its job's output, whose restart takes the
output's copier over at once (workers/watch_takeover.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from orch.runtime.procfs import alive
from tests.e2e.conftest import Orch, wait_for

pytestmark = pytest.mark.e2e
OUTAGE_S = 30.0

TASK = """\
name: steady
resources:
  cloud: local
  cpus: 1
setup: |
  echo setting up; sleep 8
run: |
  echo survived the restart
"""


def test_launch_follows_through_a_server_restart(tmp_path: Path) -> None:
    cli = Orch(tmp_path / "restart-home")
    cli.env["PYTHONUNBUFFERED"] = "1"  # each line as it is printed: the test reads along
    task = tmp_path / "steady.yaml"
    task.write_text(TASK)
    try:
        cli("server", "start")
        before = cli.plane().state()
        assert before is not None
        launch = cli.popen("launch", "-c", "steady", str(task))
        wait_for(lambda: any((Path(h) / "node.json").exists() for h in cli.node_homes("steady")),
                 timeout=120, what="the cluster's node to exist")
        os.kill(before.server_pid, signal.SIGKILL)  # mid-launch: the setup is under way
        wait_for(lambda: not alive(before.server_pid), what="the server to die")
        # The outage: longer than the SDK's own retries, which ride out a short absence
        # unseen (the CLI says it waits only once they give up, after about 10 s).
        time.sleep(OUTAGE_S)
        cli("server", "start")
        output, _ = launch.communicate(timeout=300)
        after = cli.plane().state()

        assert launch.returncode == 0, output
        assert "survived the restart" in output
        assert "the control plane is not answering" in output
        assert "the control plane answers again" in output
        assert "Traceback" not in output and "WARN" not in output  # words, not SDK logs
        assert after is not None and after.port == before.port  # back on its own port
        assert [c["status"] for c in cli.json("status")] == ["UP"]
    finally:
        cli("down", "-y", "steady", check=False)
        cli("server", "stop")


FOLLOWED = """\
name: followed
resources:
  cloud: local
  cpus: 1
run: |
  echo started; sleep 15; echo finished
"""


def test_a_worker_killed_while_a_launch_follows_its_job_is_taken_over_at_its_restart(
    tmp_path: Path,
) -> None:
    cli = Orch(tmp_path / "follow-home")
    cli.env["PYTHONUNBUFFERED"] = "1"
    task = tmp_path / "followed.yaml"
    task.write_text(FOLLOWED)
    try:
        cli("server", "start")
        before = cli.plane().state()
        assert before is not None and before.worker_pid
        launch = cli.popen("launch", "-y", "-c", "followed", str(task))
        assert launch.stdout is not None
        for line in launch.stdout:  # the copier's watch runs on the worker from here on
            if line.strip() == "started":
                break
        os.kill(before.worker_pid, signal.SIGKILL)
        cli("server", "start")  # a new worker; the watch's heartbeat timeout is 5 minutes
        restarted = time.monotonic()
        output, _ = launch.communicate(timeout=300)

        assert launch.returncode == 0, output
        assert "finished" in output
        assert time.monotonic() - restarted < 120, "the copier waited for its heartbeat timeout"
    finally:
        cli("down", "-y", "followed", check=False)
        cli("server", "stop")
