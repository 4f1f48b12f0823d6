"""The SSH command runner: paramiko, one shared connection per node, trust on first use.

Connections. One paramiko ``Transport`` per ``user@host:port`` lives in a process-wide pool
(``POOL``), so the many runners an activity worker creates for one node share a single
TCP connection and handshake. A runner holds its connection from first use to ``close()``;
a connection nobody holds is closed once it has been idle for ``IDLE_CLOSE_SECONDS``
(checked whenever the pool is used, and by a reaper thread while connections are open) or
by ``POOL.close_all()``. A pooled connection that died (node rebooted, network dropped) is
replaced on next use. Each open connection has a paramiko thread reading its socket; it
wakes every ``READ_WAKEUP_SECONDS`` when nothing comes (paramiko's own 0.1 s made a few
hundred connections left by recent launches a steady CPU cost of the worker). sshd
allows 10 sessions (commands, uploads) at once per connection by default (MaxSessions).

Reaching a booting VM. Connecting retries with exponential backoff (``FIRST_BACKOFF`` to
``MAX_BACKOFF``) on every network or handshake failure — refused, timed out, no route,
reset, a banner that never comes — and on failed authentication too, because cloud-init
may install the public key a few seconds after sshd starts listening. It gives up with
``NodeUnreachableError`` once the total deadline has passed. A changed host key is never
retried.

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
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
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
from orch.runtime.ssh_host_keys import (
    HostKeyChangedError,
    TrustOnFirstUse,
    changed_key_error,
    host_key_name,
    known_hosts_path,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_DEADLINE = 60.0  # seconds a runner keeps trying to reach an up node
ATTEMPT_TIMEOUT = 15.0  # one TCP connect, banner, key exchange or authentication
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
KEEPALIVE_SECONDS = 30  # SSH-level keepalive, so NATs and firewalls keep idle connections
TCP_USER_TIMEOUT_MS = 90_000  # unacknowledged data this long means the peer is gone
IDLE_CLOSE_SECONDS = 120.0
READ_WAKEUP_SECONDS = 1.0
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


def connection_key(node: NodeInfo) -> str:
    """The pool key: one connection per ``user@host:port``."""
    return f"{_user(node)}@{node.address}:{node.ssh_port}"


def _user(node: NodeInfo) -> str:
    if not node.ssh_user:
        raise ValueError(f"node {node.instance_id} has no ssh_user")
    return node.ssh_user


# --- connecting ------------------------------------------------------------------------------


def _open_socket(node: NodeInfo, timeout: float) -> socket.socket:
    sock = socket.create_connection((node.address, node.ssh_port), timeout=timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux: fail fast when the node vanishes
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
    return sock


def _handshake(node: NodeInfo, pkey: paramiko.PKey | None, timeout: float) -> paramiko.SSHClient:
    """One attempt: TCP, key exchange, host key check, authentication."""
    sock = _open_socket(node, timeout)
    client = paramiko.SSHClient()
    if known_hosts_path().exists():
        client.load_host_keys(str(known_hosts_path()))
    client.set_missing_host_key_policy(TrustOnFirstUse())
    try:
        client.connect(
            node.address,
            port=node.ssh_port,
            username=_user(node),
            pkey=pkey,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            # With an explicit key use only that key; without one, do what ssh does.
            allow_agent=pkey is None,
            look_for_keys=pkey is None,
        )
    except BaseException as exc:
        client.close()
        sock.close()
        if isinstance(exc, paramiko.BadHostKeyException):
            raise changed_key_error(host_key_name(node), exc.key) from exc
        raise
    transport = client.get_transport()
    assert transport is not None  # connect() succeeded
    transport.set_keepalive(KEEPALIVE_SECONDS)
    sock.settimeout(READ_WAKEUP_SECONDS)  # paramiko set 0.1 s: its thread's wake-ups
    return client


def _connect(node: NodeInfo, deadline: float) -> paramiko.SSHClient:
    """Connect to ``node``, retrying with exponential backoff for ``deadline`` seconds."""
    pkey = paramiko.PKey.from_path(node.ssh_key_path) if node.ssh_key_path else None
    give_up = time.monotonic() + deadline
    backoff = FIRST_BACKOFF
    attempts = 0
    while True:
        attempts += 1
        timeout = max(min(ATTEMPT_TIMEOUT, give_up - time.monotonic()), 0.1)
        try:
            return _handshake(node, pkey, timeout)
        except HostKeyChangedError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            error: Exception = exc
        remaining = give_up - time.monotonic()
        if remaining <= 0:
            raise NodeUnreachableError(
                f"cannot reach {connection_key(node)} over SSH after {attempts} attempts "
                f"in {deadline:g} s: {type(error).__name__}: {error}"
            ) from error
        log.debug("ssh %s not ready (%s), retrying", connection_key(node), error)
        time.sleep(min(backoff, remaining))
        backoff = min(backoff * 2, MAX_BACKOFF)


@dataclass
class PooledConnection:
    """One pooled connection; ``users`` counts the runners holding it."""

    client: paramiko.SSHClient
    users: int = 0
    idle_since: float = field(default_factory=time.monotonic)

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.client.get_transport()
        if transport is None:
            raise NodeUnreachableError("the SSH connection was closed")
        return transport

    def alive(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()


class ConnectionPool:
    """SSH connections shared by every runner of this process, one per user@host:port."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[str, PooledConnection] = {}
        self._connecting: dict[str, threading.Lock] = {}  # one handshake per key at a time
        self._reaper: threading.Thread | None = None

    def acquire(self, node: NodeInfo, deadline: float) -> PooledConnection:
        """A live connection to ``node``, connecting (with retries) if needed; the caller
        holds it until ``release``."""
        key = connection_key(node)
        with self._lock:
            self._close_idle()
            connecting = self._connecting.setdefault(key, threading.Lock())
        with connecting:
            with self._lock:
                pooled = self._connections.get(key)
                if pooled is None or not pooled.alive():
                    pooled = None
            if pooled is None:
                pooled = PooledConnection(_connect(node, deadline))
            with self._lock:
                stale = self._connections.get(key)
                if stale is not None and stale is not pooled:
                    stale.client.close()
                self._connections[key] = pooled
                pooled.users += 1
                self._start_reaper()
                return pooled

    def _start_reaper(self) -> None:
        """Close idle connections even when nobody uses the pool (called with the lock)."""
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="ssh-pool-reaper",
                                            daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            time.sleep(IDLE_CLOSE_SECONDS / 4)
            with self._lock:
                self._close_idle()
                if not self._connections:
                    self._reaper = None
                    return

    def release(self, pooled: PooledConnection) -> None:
        with self._lock:
            pooled.users -= 1
            pooled.idle_since = time.monotonic()

    def close_all(self) -> None:
        with self._lock:
            for pooled in self._connections.values():
                pooled.client.close()
            self._connections.clear()

    def _close_idle(self) -> None:
        now = time.monotonic()
        for key, pooled in list(self._connections.items()):
            if pooled.users == 0 and (
                now - pooled.idle_since > IDLE_CLOSE_SECONDS or not pooled.alive()
            ):
                pooled.client.close()
                del self._connections[key]


POOL = ConnectionPool()


# --- the runner ------------------------------------------------------------------------------

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
