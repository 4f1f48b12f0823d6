"""Ctrl-C in `orch launch` at a terminal asks whether to cancel the launch or leave it
running, as a SkyPilot user expects (issue 12, part 4). Run in a real pseudo-terminal:
the Ctrl-C goes through the terminal's line discipline as a user's does."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import ORCH, REPO, Orch, wait_for

pytestmark = pytest.mark.e2e

TASK = """\
resources:
  cloud: local
  cpus: 1
setup: |
  sleep 120
run: |
  echo never
"""


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty (stdin),
    so that Ctrl-C typed there is a SIGINT, as at a user's terminal. SIGINT is handled as
    there too: a test run started as a shell's background job ignores it, and an ignored
    signal stays ignored across exec (the CLI would then never see the Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A command on a pseudo-terminal, read as a user reads it."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave,
                                        env=env, cwd=REPO, preexec_fn=_own_terminal)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r} in:\n{self.seen[-2000:]}")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the command ended and closed the terminal
                    continue

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        code = self.process.wait(timeout=120)
        os.close(self.master)
        return code


def test_ctrl_c_asks_and_cancels_the_launch(orch: Orch, tmp_path: Path) -> None:
    task = tmp_path / "slow-setup.yaml"
    task.write_text(TASK)
    terminal = Terminal([ORCH, "launch", "-y", "-c", "ctrlc", str(task)], orch.env)
    try:
        terminal.expect("running setup")  # the nodes exist, the setup sleeps
        terminal.type("\x03")  # Ctrl-C
        terminal.expect("Cancel the launch of ctrlc?")
        terminal.type("y\n")
        terminal.expect("Cancelled the launch of ctrlc")
        code = terminal.close()
        status = wait_for(lambda: next((c for c in orch.json("status")
                                        if c["name"] == "ctrlc"), None), what="ctrlc")
    finally:
        orch("down", "-y", "ctrlc", check=False)

    assert code == 130
    assert status is not None and status["status"] == "INIT"
    assert "Traceback" not in terminal.seen
