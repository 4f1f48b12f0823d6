"""The command-runner interface: how orch runs a command on a node and what it gets back.

Implemented by ``orch.runtime.runner.LocalRunner`` (a local-cloud sandbox) and
``orch.runtime.ssh.SSHRunner``; ``orch.runtime.runner.runner_for`` picks one for a node.
A remote path is absolute, or relative to the node's home (``~/x`` and ``x`` are the
same). Output is streamed line by line to ``on_line`` when given; the result keeps the
last lines so errors can quote them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

from pydantic import BaseModel

from orch.clouds.base import NodeInfo

TAIL_LINES = 40


class CommandResult(BaseModel):
    returncode: int
    tail: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandError(Exception):
    def __init__(self, command: str, result: CommandResult):
        super().__init__(f"command failed with exit code {result.returncode}: {command}\n"
                         f"{result.tail}")
        self.result = result


class NodeUnreachableError(Exception):
    """The node cannot be reached (no such host, SSH refused, sandbox gone)."""


class CommandRunner(ABC):
    node: NodeInfo

    @abstractmethod
    def run(
        self,
        command: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Run ``command`` with bash on the node."""

    @abstractmethod
    def upload(self, local: str, remote: str) -> None:
        """Copy a file or a directory tree (contents merged) to the node."""

    def close(self) -> None:  # noqa: B027 - optional for runners without connections
        """Release connections."""

    def check(self, command: str, **kwargs) -> CommandResult:
        result = self.run(command, **kwargs)
        if not result.ok:
            raise CommandError(command, result)
        return result

    def __enter__(self) -> CommandRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect_lines(
    stream, on_line: Callable[[str], None] | None, tail: deque[str]
) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        tail.append(line)
        if on_line:
            on_line(line)
