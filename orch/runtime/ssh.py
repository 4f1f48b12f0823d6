"""The SSH command runner: paramiko, one shared connection per node, trust on first use.

Connections. One paramiko ``Transport`` per ``user@host:port`` lives in a process-wide pool
(``POOL``), so the many runners an activity worker creates for one node share a single
TCP connection and handshake. A runner holds its connection from first use to ``close()``;
a connection nobody holds is closed once it has been idle for ``IDLE_CLOSE_SECONDS``
(checked whenever the pool is used) or by ``POOL.close_all()``. A pooled connection that
died (node rebooted, network dropped) is replaced on next use. sshd allows 10 sessions
(commands, uploads) at once per connection by default (MaxSessions).

Reaching a booting VM. Connecting retries with exponential backoff (``FIRST_BACKOFF`` to
``MAX_BACKOFF``) on every network or handshake failure — refused, timed out, no route,
reset, a banner that never comes — and on failed authentication too, because cloud-init
may install the public key a few seconds after sshd starts listening. It gives up with
``NodeUnreachableError`` once the total deadline has passed. A changed host key is never
retried.

Host keys. The first key a host shows is recorded in ``$ORCH_HOME/known_hosts``
(OpenSSH format, ``[host]:port`` for ports other than 22) and every later connection must
show the same key, else ``HostKeyChangedError``. Clouds reuse IP addresses, so whoever
terminates a node should ``forget_host_key(node)``.

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

Uploads go over SFTP and behave like ``rsync -a`` without ``--delete``: directories are
created as needed, file and directory modes and file mtimes are copied (an existing
target directory keeps its own mode: it may be the home), symlinks stay symlinks, a file whose
size and mtime already match is skipped (so re-syncing a workdir costs one directory
listing per directory), and remote files missing locally are left alone (SkyPilot's
rsync does not delete either). A file's mtime is set after its content, so an interrupted
copy never looks up to date.
"""

from __future__ import annotations

import fcntl
import logging
import os
import posixpath
import re
import shlex
import socket
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import paramiko

from orch.clouds.base import NodeInfo
from orch.config import orch_home
from orch.runtime.runner import (
    TAIL_LINES,
    CommandResult,
    CommandRunner,
    NodeUnreachableError,
    collect_lines,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_DEADLINE = 60.0  # seconds a runner keeps trying to reach an up node
ATTEMPT_TIMEOUT = 15.0  # one TCP connect, banner, key exchange or authentication
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
KEEPALIVE_SECONDS = 30  # SSH-level keepalive, so NATs and firewalls keep idle connections
TCP_USER_TIMEOUT_MS = 90_000  # unacknowledged data this long means the peer is gone
IDLE_CLOSE_SECONDS = 300.0
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


class HostKeyChangedError(Exception):
    """The host shows a different key from the one recorded on first contact."""


def known_hosts_path() -> Path:
    return orch_home() / "known_hosts"


def connection_key(node: NodeInfo) -> str:
    """The pool key: one connection per ``user@host:port``."""
    return f"{_user(node)}@{node.address}:{node.ssh_port}"


def _user(node: NodeInfo) -> str:
    if not node.ssh_user:
        raise ValueError(f"node {node.instance_id} has no ssh_user")
    return node.ssh_user


def _host_key_name(node: NodeInfo) -> str:
    """How OpenSSH (and paramiko) name a host in known_hosts."""
    return node.address if node.ssh_port == 22 else f"[{node.address}]:{node.ssh_port}"


# --- host keys: trust on first use ---------------------------------------------------------


@contextmanager
def _known_hosts_locked() -> Iterator[Path]:
    """The known_hosts file, locked against other processes that record keys."""
    path = known_hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def _load_known_hosts(path: Path) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    if path.exists():
        keys.load(str(path))
    return keys


def _changed_key_error(hostname: str, shown: paramiko.PKey) -> HostKeyChangedError:
    return HostKeyChangedError(
        f"host key for {hostname} changed: it now shows {shown.get_name()} "
        f"{shown.fingerprint}, which is not the key recorded in {known_hosts_path()}. "
        "Refusing to connect. If the machine was legitimately replaced, remove its line "
        "from that file (orch.runtime.ssh.forget_host_key)."
    )


class _TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Records a host's first key; paramiko itself compares keys on later connections."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        with _known_hosts_locked() as path:
            # Another process may have recorded this host since the file was read.
            recorded = _load_known_hosts(path).lookup(hostname)
            if recorded is not None:
                if recorded.get(key.get_name()) == key:
                    return
                raise _changed_key_error(hostname, key)
            with open(path, "a") as known_hosts:
                known_hosts.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        log.info("recorded host key %s %s for %s", key.get_name(), key.fingerprint, hostname)


def forget_host_key(node: NodeInfo) -> None:
    """Drop the recorded key of ``node``'s address, e.g. when the node is terminated and its
    IP address may go to another machine."""
    hostname = _host_key_name(node)
    with _known_hosts_locked() as path:
        keys = _load_known_hosts(path)
        if keys.lookup(hostname) is None:
            return
        del keys[hostname]
        # Rewritten whole and renamed into place: connecting processes read it unlocked.
        partial = path.with_name(path.name + ".new")
        keys.save(str(partial))
        os.replace(partial, path)


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
    client.set_missing_host_key_policy(_TrustOnFirstUse())
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
            raise _changed_key_error(_host_key_name(node), exc.key) from exc
        raise
    transport = client.get_transport()
    assert transport is not None  # connect() succeeded
    transport.set_keepalive(KEEPALIVE_SECONDS)
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
                return pooled

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
            sync = _SftpSync(sftp)
            target = sync.root(source, _remote_path(sftp, remote))
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


# --- uploads ---------------------------------------------------------------------------------


def _remote_path(sftp: paramiko.SFTPClient, remote: str) -> str:
    if remote.startswith("/"):
        return posixpath.normpath(remote)
    home = sftp.normalize(".")  # an sftp session starts in the home directory
    relative = "" if remote == "~" else remote.removeprefix("~/")
    return posixpath.normpath(posixpath.join(home, relative))


def _attributes(
    sftp: paramiko.SFTPClient, path: str, *, follow: bool = False
) -> paramiko.SFTPAttributes | None:
    try:
        return sftp.stat(path) if follow else sftp.lstat(path)
    except FileNotFoundError:
        return None


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """``mkdir -p``."""
    if path in ("", "/") or _attributes(sftp, path, follow=True) is not None:
        return
    _makedirs(sftp, posixpath.dirname(path))
    sftp.mkdir(path)


def _kind(attributes: paramiko.SFTPAttributes | None) -> int:
    """The file type bits (stat.S_IFREG, S_IFDIR, S_IFLNK...), 0 when missing."""
    return stat.S_IFMT(attributes.st_mode or 0) if attributes is not None else 0


def _permissions(attributes: paramiko.SFTPAttributes) -> int:
    return stat.S_IMODE(attributes.st_mode or 0)


_Remote = paramiko.SFTPAttributes | None  # what stands at a remote path (None: nothing)


class _SftpSync:
    """Copies a local file or tree to a remote path, skipping what is up to date."""

    def __init__(self, sftp: paramiko.SFTPClient) -> None:
        self.sftp = sftp
        self.copied = 0
        self.unchanged = 0

    def root(self, source: Path, target: str) -> str:
        """Like ``cp`` for a file (into ``target`` if it is a directory) and like
        ``rsync -a source/ target`` for a directory; returns where it went. An existing
        target directory keeps its own mode (it may be the home directory)."""
        existing = _attributes(self.sftp, target, follow=True)
        if source.is_dir():
            if existing is None:
                _makedirs(self.sftp, posixpath.dirname(target))
                self._mkdir(target, source.stat())
            elif _kind(existing) != stat.S_IFDIR:
                raise NotADirectoryError(f"remote {target} exists and is not a directory")
            self._children(source, target, fresh=existing is None)
            return target
        if _kind(existing) == stat.S_IFDIR:
            target = posixpath.join(target, source.name)
            existing = _attributes(self.sftp, target)
        else:
            _makedirs(self.sftp, posixpath.dirname(target))
            existing = _attributes(self.sftp, target)
        self._file(source, target, existing, source.stat())
        return target

    def _children(self, source: Path, target: str, *, fresh: bool) -> None:
        listing = {} if fresh else {a.filename: a for a in self.sftp.listdir_attr(target)}
        for child in sorted(source.iterdir()):
            self._entry(child, posixpath.join(target, child.name), listing.get(child.name))

    def _entry(self, source: Path, target: str, existing: _Remote) -> None:
        info = source.lstat()
        kind = stat.S_IFMT(info.st_mode)
        if kind == stat.S_IFLNK:
            self._symlink(source, target, existing)
        elif kind == stat.S_IFREG:
            self._file(source, target, existing, info)
        elif kind == stat.S_IFDIR:
            if existing is not None and _kind(existing) == stat.S_IFDIR:
                self._chmod_if_needed(target, existing, info)
            else:
                self._make_room(target, existing)
                self._mkdir(target, info)
            self._children(source, target, fresh=_kind(existing) != stat.S_IFDIR)
        # sockets, fifos and devices are not copied

    def _make_room(self, target: str, existing: _Remote) -> None:
        """Remove a remote entry of another type that stands where ``target`` goes."""
        if _kind(existing) == stat.S_IFDIR:
            raise IsADirectoryError(f"remote {target} is a directory; not replacing it")
        if existing is not None:
            self.sftp.remove(target)

    def _mkdir(self, target: str, info: os.stat_result) -> None:
        self.sftp.mkdir(target)
        self.sftp.chmod(target, stat.S_IMODE(info.st_mode))  # mkdir's mode meets a umask

    def _chmod_if_needed(
        self, target: str, existing: paramiko.SFTPAttributes, info: os.stat_result
    ) -> None:
        if _permissions(existing) != stat.S_IMODE(info.st_mode):
            self.sftp.chmod(target, stat.S_IMODE(info.st_mode))

    def _file(self, source: Path, target: str, existing: _Remote, info: os.stat_result) -> None:
        if (
            existing is not None
            and _kind(existing) == stat.S_IFREG
            and existing.st_size == info.st_size
            and existing.st_mtime == int(info.st_mtime)
        ):
            self._chmod_if_needed(target, existing, info)
            self.unchanged += 1
            return
        if _kind(existing) != stat.S_IFREG:
            self._make_room(target, existing)  # never write through a remote symlink
        self.sftp.put(str(source), target)
        self.sftp.chmod(target, stat.S_IMODE(info.st_mode))
        self.sftp.utime(target, (int(info.st_atime), int(info.st_mtime)))
        self.copied += 1

    def _symlink(self, source: Path, target: str, existing: _Remote) -> None:
        link = os.readlink(source)
        if _kind(existing) == stat.S_IFLNK and self.sftp.readlink(target) == link:
            self.unchanged += 1
            return
        self._make_room(target, existing)
        self.sftp.symlink(link, target)
        self.copied += 1
