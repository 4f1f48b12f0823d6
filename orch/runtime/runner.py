"""Running commands on a node: the local-cloud runner, and :func:`runner_for`, which picks
the runner a node needs (``LocalRunner`` here, ``orch.runtime.ssh.SSHRunner``). The
interface both implement is ``orch.runtime.commands``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from orch.clouds.base import NodeInfo
from orch.runtime.commands import (
    TAIL_LINES,
    CommandResult,
    CommandRunner,
    NodeUnreachableError,
    collect_lines,
)

# Every process a local node starts carries this variable, so that the node's processes
# (Ray's daemons, the job driver, the user's commands) can be found and killed without
# touching anything else on the machine.
LOCAL_NODE_MARKER = "ORCH_LOCAL_NODE"


class LocalRunner(CommandRunner):
    """Runs commands on a local-cloud node: a sandbox directory used as its home."""

    def __init__(self, node: NodeInfo):
        if not node.home:
            raise ValueError("a local node needs a home directory")
        self.node = node
        self.home = Path(node.home)

    def _path(self, remote: str) -> Path:
        path = Path(remote.removeprefix("~/")) if remote != "~" else Path(".")
        return path if path.is_absolute() else self.home / path

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HOME=str(self.home),
            PWD=str(self.home),
            **{LOCAL_NODE_MARKER: str(self.home)},
            ORCH_NODE_IP=self.node.internal_ip,
        )
        env.update(extra or {})
        return env

    def run(
        self,
        command: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        if not self.home.is_dir():
            raise NodeUnreachableError(f"node {self.node.instance_id}: {self.home} is gone")
        workdir = self._path(cwd) if cwd else self.home
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=workdir,
            env=self.environment(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        reader = threading.Thread(target=collect_lines, args=(process.stdout, on_line, tail))
        reader.start()
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
            tail.append(f"(timed out after {timeout} s)")
        reader.join()
        return CommandResult(returncode=returncode, tail="\n".join(tail))

    def upload(self, local: str, remote: str) -> None:
        if not self.home.is_dir():
            raise NodeUnreachableError(f"node {self.node.instance_id}: {self.home} is gone")
        source, target = Path(local), self._path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.copy2(source, target)


def runner_for(node: NodeInfo, connect_deadline: float | None = None) -> CommandRunner:
    """The runner for ``node``; ``connect_deadline`` bounds how long an SSH runner keeps
    trying to reach it (its default suits a machine that is still booting)."""
    if node.runner == "local":
        return LocalRunner(node)
    from orch.runtime.ssh import SSHRunner  # paramiko only when a node needs it

    if connect_deadline is None:
        return SSHRunner(node)
    return SSHRunner(node, connect_deadline=connect_deadline)
