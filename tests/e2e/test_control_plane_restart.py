"""`orch launch` rides out a control plane that dies and comes back mid-launch: it says
so, keeps following, and reports the launch's real outcome (issue 12, part 7)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orch.runtime.procfs import alive
from tests.e2e.conftest import Orch, wait_for

pytestmark = pytest.mark.e2e

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


def read_until(process: subprocess.Popen[str], text: str, timeout: float) -> str:
    """The process's output up to the line holding ``text`` (its stdout is a pipe)."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if not ready:
            continue
        line = process.stdout.readline()
        if not line:
            break  # the process ended
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"never printed {text!r}:\n{''.join(seen)}")


def test_launch_follows_through_a_server_restart(tmp_path: Path) -> None:
    cli = Orch(tmp_path / "restart-home")
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
        # The server stays away until the CLI has said it noticed (the SDK's own retries
        # ride out a short absence unseen): then it comes back.
        seen = read_until(launch, "the control plane is not answering", timeout=120)
        cli("server", "start")
        rest, _ = launch.communicate(timeout=300)
        output = seen + rest
        after = cli.plane().state()

        assert launch.returncode == 0, output
        assert "survived the restart" in output
        assert "the control plane answers again" in output
        assert "Traceback" not in output and "WARN" not in output  # words, not SDK logs
        assert after is not None and after.port == before.port  # back on its own port
        assert [c["status"] for c in cli.json("status")] == ["UP"]
    finally:
        cli("down", "-y", "steady", check=False)
        cli("server", "stop")
