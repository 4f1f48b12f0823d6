"""The SSH command runner: paramiko, one shared connection per node, trust on first use.

Connections are pooled and opened with retries (``orch.runtime.ssh_connect``): the many
runners an activity worker creates for one node share one connection.

Commands run as ``bash --login -c``: the login shell reads /etc/profile and ~/.profile
(or ~/.bash_profile), so PATH has what images and earlier setup steps put there, much like
an interactive ``ssh``; ~/.bashrc is read only if the profile sources it. ``env`` is
exported after the profile (so it wins) with every value ``shlex.quote``d; ``cwd`` is
relative to the home directory unless absolute. The command runs in its own process group
with stdin from /dev/null, stdout and stderr combined. A small bash wrapper watches the
session's stdin: when it closes before the command ends — ``run()`` timed out, or the
connection to the controller was lost — the whole process group is killed, so a command
never outlives its connection. Daemons that left the group (``setsid``) survive the kill,
and nothing is killed when the command ends normally, so what it started keeps running.

Host keys are trusted on first use (``orch.runtime.ssh_host_keys``); uploads go over SFTP
(``orch.runtime.sftp_sync``).
"""

from __future__ import annotations

import logging
import re
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import paramiko

from orch.clouds.base import NodeInfo
from orch.runtime.commands import (
    TAIL_LINES,
    CommandResult,
    CommandRunner,
    NodeUnreachableError,
    collect_lines,
)
from orch.runtime.sftp_sync import SftpSync, remote_path
from orch.runtime.ssh_connect import (
    ATTEMPT_TIMEOUT,
    DEFAULT_CONNECT_DEADLINE,
    POOL,
    PooledConnection,
    connection_key,
)

log = logging.getLogger(__name__)

KILL_GRACE_SECONDS = 10.0  # after a timeout: how long to wait for the kill to be confirmed

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Runs the command in its own process group (job control on while it starts) and kills
# that group when the session's stdin reaches EOF before the command ends. The wrapper's
# own stderr goes to /dev/null: bash would report the kill there ("Killed ...").
_WRAPPER = """\
exec 2>/dev/null
set -m
bash --login -c {script} </dev/null 2>&1 &
pid=$!
set +m
{{ while read -r _; do :; done; kill -KILL -- -"$pid"; }} <&0 &
watchdog=$!
wait "$pid"
rc=$?
kill "$watchdog"
exit "$rc"
"""



_Opened = TypeVar("_Opened")


def _shell_path(path: str) -> str:
    """A shell word for ``path``; relative paths (and ``~/x``) are under $HOME."""
    if path.startswith("/"):
        return shlex.quote(path)
    relative = "" if path == "~" else path.removeprefix("~/")
    return '"$HOME"' + (f"/{shlex.quote(relative)}" if relative else "")


def _remote_command(command: str, env: dict[str, str] | None, cwd: str | None) -> str:
    """The exec request for ``command``: a ``bash -c`` line (so the user's login shell does
    not matter) running the wrapper described in the module docstring."""
    lines = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"invalid environment variable name: {name!r}")
        lines.append(f"export {name}={shlex.quote(value)}")
    if cwd:
        lines.append(f"cd {_shell_path(cwd)} || exit 1")
    lines.append(command)
    wrapper = _WRAPPER.format(script=shlex.quote("\n".join(lines)))
    return f"bash -c {shlex.quote(wrapper)}"


class SSHRunner(CommandRunner):
    """Runs commands on, and uploads files to, a node over SSH (see the module docstring).

    ``connect_deadline`` bounds how long connecting keeps retrying; ``run``'s ``timeout``
    bounds the command only.
    """

    def __init__(
        self, node: NodeInfo, *, connect_deadline: float = DEFAULT_CONNECT_DEADLINE
    ) -> None:
        self._key = connection_key(node)  # also checks that the node has an ssh_user
        self.node = node
        self.connect_deadline = connect_deadline
        self._connection: PooledConnection | None = None

    @property
    def transport(self) -> paramiko.Transport:
        """The pooled connection this runner uses; (re)connects when there is none alive."""
        if self._connection is not None and not self._connection.alive():
            self.close()
        if self._connection is None:
            self._connection = POOL.acquire(self.node, self.connect_deadline)
        return self._connection.transport

    def close(self) -> None:
        if self._connection is not None:
            POOL.release(self._connection)
            self._connection = None

    def _open(self, opener: Callable[[paramiko.Transport], _Opened]) -> _Opened:
        """``opener(transport)`` for a new channel; if the pooled connection turns out to
        be dead, reconnect once. A refused channel (sshd's MaxSessions, 10 by default, per
        connection) is not a dead connection and is raised as is."""
        transport = self.transport
        try:
            return opener(transport)
        except paramiko.ChannelException:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            log.info("ssh %s: connection failed (%s), reconnecting", self._key, exc)
            transport.close()  # every holder reconnects on its next use
        try:
            return opener(self.transport)
        except paramiko.ChannelException:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise NodeUnreachableError(f"ssh {self._key}: {exc}") from exc

    def _unreachable_if_dead(
        self, transport: paramiko.Transport | None, doing: str, exc: BaseException | None
    ) -> None:
        if transport is None or not transport.is_active():
            raise NodeUnreachableError(f"ssh {self._key}: connection lost {doing}") from exc

    def run(
        self,
        command: str,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        request = _remote_command(command, env, cwd)
        channel = self._open(lambda transport: transport.open_session(timeout=ATTEMPT_TIMEOUT))
        channel.set_combine_stderr(True)
        try:
            # Not retried: the command may have started before the connection failed.
            channel.exec_command(request)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            channel.close()
            self._unreachable_if_dead(channel.get_transport(), f"starting: {command}", exc)
            raise
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        reader = threading.Thread(
            target=collect_lines, args=(channel.makefile("rb"), on_line, tail), daemon=True
        )
        reader.start()
        give_up = None if timeout is None else time.monotonic() + timeout

        def remaining() -> float | None:
            return None if give_up is None else max(give_up - time.monotonic(), 0.0)

        # Done when the output has ended (every process holding it closed it) and the exit
        # status has come, in whichever order sshd sends them.
        reader.join(remaining())
        done = not reader.is_alive() and channel.status_event.wait(remaining())
        if not done and not channel.status_event.is_set():
            channel.shutdown_write()  # stdin EOF: the wrapper kills the process group
            channel.status_event.wait(KILL_GRACE_SECONDS)
            tail.append(f"(timed out after {timeout} s)")
        elif not done:
            tail.append(f"(exited, but its output was still open after {timeout} s)")
        channel.close()
        reader.join()
        if channel.exit_status == -1 and done:  # closed without an exit status
            self._unreachable_if_dead(channel.get_transport(), f"running: {command}", None)
            tail.append("(no exit status: the remote shell was killed)")
        return CommandResult(returncode=channel.exit_status, tail="\n".join(tail))

    def upload(self, local: str, remote: str) -> None:
        source = Path(local)
        if not source.exists():
            raise FileNotFoundError(local)
        sftp = self._open(paramiko.SFTPClient.from_transport)
        assert sftp is not None  # from_transport returns None only for a closed transport
        try:
            sync = SftpSync(sftp)
            target = sync.root(source, remote_path(sftp, remote))
            log.debug("upload %s -> %s:%s: %d copied, %d unchanged",
                      local, self._key, target, sync.copied, sync.unchanged)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._unreachable_if_dead(sftp.sock.get_transport(), "uploading", exc)
            raise
        finally:
            sftp.close()


def wait_for_ssh(node: NodeInfo, deadline: float) -> None:
    """Block until ``node`` accepts SSH and runs a command, for at most about ``deadline``
    seconds; raise ``NodeUnreachableError`` (or ``HostKeyChangedError``) otherwise. The
    connection stays in the pool for the runners that come next."""
    give_up = time.monotonic() + deadline
    with SSHRunner(node, connect_deadline=deadline) as runner:
        runner.check("true", timeout=max(give_up - time.monotonic(), ATTEMPT_TIMEOUT))
