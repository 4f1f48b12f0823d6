"""Commands on nodes from an event loop: the managed-job watch's client.

The watch holds one long poll per running job (``orch.runtime.jobs.wait_then_poll_command``):
thousands of commands open at once, each waiting up to half a minute. Run through the
paramiko runner, each open connection costs a thread (paramiko's ``Transport`` reads its
socket in a thread of its own, waking ten times a second) and each waiting command another
one; here every connection and command lives in the worker's event loop, at the cost of
a few objects each.

Connections (asyncssh). One per ``user@host:port`` (the key of ``orch.runtime.ssh``'s pool),
opened on first use and reused by every command to that node; a connection that died (node
rebooted, network dropped) is dropped and the command retried once on a new one. Connecting
retries with backoff until ``connect_deadline``, like the paramiko runner, and trusts host
keys on first use in the same ``known_hosts`` (``orch.runtime.ssh_host_keys``). At most
``max_connections`` are open per event loop: past that the least recently used idle one is
closed, and when none is idle a new command waits for one. At most ``max_handshakes``
handshakes are under way at once (the rest wait their turn before their attempt's clock
starts): a handshake's key exchange is CPU in the worker's process, and a worker that
takes over a thousand watches at once (a restart, a ramp) would otherwise spend seconds
of its event loop on them together, long enough for its workflow tasks to time out.

Local-cloud nodes run the command as a subprocess with the node's environment.

Unlike ``SSHRunner.run``, the command runs as given (no login shell, no process-group
wrapper): its stdin stays open until the command ends or is given up, so a command that
reads its stdin (the long poll does) ends when the watcher goes away.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
import time
import weakref
from dataclasses import dataclass, field

import asyncssh
import paramiko

from orch.clouds.base import NodeInfo
from orch.runtime.commands import TAIL_LINES, CommandResult, NodeUnreachableError
from orch.runtime.runner import LocalRunner
from orch.runtime.ssh_connect import (
    ATTEMPT_TIMEOUT,
    FIRST_BACKOFF,
    KEEPALIVE_SECONDS,
    MAX_BACKOFF,
    connection_key,
)
from orch.runtime.ssh_host_keys import HostKeyChangedError, check_host_key, host_key_name

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_HANDSHAKES = 16
KEEPALIVE_COUNT_MAX = 3  # unanswered keepalives (30 s apart) before a connection is dead

_CONNECTION_ERRORS = (OSError, EOFError, asyncssh.Error, asyncio.TimeoutError)


def _tail(output: str) -> str:
    return "\n".join(output.splitlines()[-TAIL_LINES:])


class _TrustOnFirstUse(asyncssh.SSHClient):
    """Checks the server's key against ``known_hosts``; keeps why it refused one."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.refused: HostKeyChangedError | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int,
                                 key: asyncssh.SSHKey) -> bool:
        kind, blob = key.export_public_key("openssh").split()[:2]
        shown = paramiko.PKey.from_type_string(kind.decode(), base64.b64decode(blob))
        try:
            check_host_key(self.hostname, shown)
        except HostKeyChangedError as exc:
            self.refused = exc
            return False
        return True


def _no_known_hosts(host: str, addr: str, port: int | None) -> tuple[list, list, list]:
    """No keys trusted up front: every key goes through ``validate_host_public_key``."""
    return [], [], []


async def _handshake(node: NodeInfo, timeout: float) -> asyncssh.SSHClientConnection:
    client = _TrustOnFirstUse(host_key_name(node))
    keys = [node.ssh_key_path] if node.ssh_key_path else ()
    try:
        return await asyncio.wait_for(asyncssh.connect(
            node.address, port=node.ssh_port, username=node.ssh_user,
            client_factory=lambda: client, known_hosts=_no_known_hosts,
            # With an explicit key use only that key; without one, do what ssh does.
            client_keys=keys or None, agent_path=None if keys else (),
            keepalive_interval=KEEPALIVE_SECONDS, keepalive_count_max=KEEPALIVE_COUNT_MAX,
            login_timeout=timeout,
        ), timeout)
    except _CONNECTION_ERRORS:
        if client.refused is not None:
            raise client.refused from None
        raise


async def _connect(node: NodeInfo, deadline: float, turns: asyncio.Semaphore
                   ) -> asyncssh.SSHClientConnection:
    """Connect to ``node``, retrying with exponential backoff for ``deadline`` seconds of
    attempts; each attempt waits for one of ``turns`` first (not counted)."""
    spent, backoff, attempts = 0.0, FIRST_BACKOFF, 0
    while True:
        attempts += 1
        timeout = max(min(ATTEMPT_TIMEOUT, deadline - spent), 0.1)
        try:
            async with turns:
                started = time.monotonic()
                try:
                    return await _handshake(node, timeout)
                finally:
                    spent += time.monotonic() - started
        except _CONNECTION_ERRORS as exc:
            error: BaseException = exc
        remaining = deadline - spent
        if remaining <= 0:
            raise NodeUnreachableError(
                f"cannot reach {connection_key(node)} over SSH after {attempts} attempts "
                f"in {deadline:g} s: {type(error).__name__}: {error}") from error
        pause = min(backoff, remaining)
        await asyncio.sleep(pause)
        spent += pause
        backoff = min(backoff * 2, MAX_BACKOFF)


@dataclass(eq=False)
class _Held:
    connection: asyncssh.SSHClientConnection
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return not self.connection.is_closed()


class AsyncConnectionPool:
    """asyncssh connections of one event loop, one per user@host:port (module docstring)."""

    def __init__(self, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_handshakes: int = DEFAULT_MAX_HANDSHAKES) -> None:
        self.max_connections = max_connections
        self._handshake_turns = asyncio.Semaphore(max_handshakes)
        self._held: dict[str, _Held] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._released = asyncio.Condition()

    @property
    def open_connections(self) -> int:
        return len(self._held)

    async def run(self, node: NodeInfo, command: str, *, timeout: float,
                  connect_deadline: float) -> CommandResult:
        """Run ``command`` on ``node``; a connection found dead is replaced once."""
        for attempt in (1, 2):
            held = await self._acquire(node, connect_deadline)
            try:
                process = await held.connection.create_process(
                    command, stderr=asyncssh.STDOUT, encoding="utf-8", errors="replace")
            except asyncssh.ChannelOpenError:
                self._release(held)
                raise  # refused (sshd's MaxSessions), not a dead connection
            except _CONNECTION_ERRORS as exc:
                self._release(held, dead=True)
                if attempt == 2:
                    raise NodeUnreachableError(f"ssh {connection_key(node)}: {exc}") from exc
                log.info("ssh %s: connection failed (%s), reconnecting", connection_key(node), exc)
                continue
            try:
                return await _completed(process, timeout)
            finally:
                self._release(held, dead=not held.alive())
        raise AssertionError("unreachable")

    async def _acquire(self, node: NodeInfo, deadline: float) -> _Held:
        key = connection_key(node)
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:  # one handshake per node at a time
            held = self._held.get(key)
            if held is None or not held.alive():
                self._held.pop(key, None)
                await self._make_room()
                held = _Held(await _connect(node, deadline, self._handshake_turns))
                self._held[key] = held
            held.users += 1
            held.last_used = time.monotonic()
            return held

    async def _make_room(self) -> None:
        """Close the least recently used idle connection while at the bound; wait for one
        to become idle when none is."""
        async with self._released:
            while len(self._held) >= self.max_connections:
                idle = [(h.last_used, k) for k, h in self._held.items() if h.users == 0]
                if idle:
                    self._close(min(idle)[1])
                else:
                    await self._released.wait()

    def _release(self, held: _Held, *, dead: bool = False) -> None:
        held.users -= 1
        held.last_used = time.monotonic()
        if dead:
            for key, other in list(self._held.items()):
                if other is held:
                    self._close(key)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._released:
            self._released.notify_all()

    def _close(self, key: str) -> None:
        held = self._held.pop(key)
        held.connection.close()

    def close_all(self) -> None:
        for key in list(self._held):
            self._close(key)


async def _completed(process: asyncssh.SSHClientProcess, timeout: float) -> CommandResult:
    try:
        done = await process.wait(timeout=timeout)
    except asyncssh.TimeoutError as exc:
        process.close()
        return CommandResult(returncode=-1, tail=_tail(str(exc.stdout or "")) +
                             f"\n(timed out after {timeout:g} s)")
    finally:
        process.close()
    status = done.exit_status if done.exit_status is not None else -1
    return CommandResult(returncode=status, tail=_tail(str(done.stdout or "")))


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = (
    weakref.WeakKeyDictionary())


def connection_pool() -> AsyncConnectionPool:
    """The pool of the running event loop (the worker has one)."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        limit = int(os.environ.get("ORCH_WATCH_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS))
        pool = _POOLS[loop] = AsyncConnectionPool(limit)
    return pool


async def _run_local(node: NodeInfo, command: str, timeout: float) -> CommandResult:
    runner = LocalRunner(node)
    if not runner.home.is_dir():
        raise NodeUnreachableError(f"node {node.instance_id}: {runner.home} is gone")
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, cwd=runner.home, env=runner.environment(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    assert process.stdout is not None and process.stdin is not None
    try:  # stdin stays open until the command ended (communicate() would close it)
        output = await asyncio.wait_for(process.stdout.read(), timeout)
        await process.wait()
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise
    finally:
        process.stdin.close()
    return CommandResult(returncode=process.returncode or 0,
                         tail=_tail(output.decode(errors="replace")))


async def run_on_node(node: NodeInfo, command: str, *, timeout: float,
                      connect_deadline: float) -> CommandResult:
    """Run ``command`` on ``node`` from the event loop (see the module docstring)."""
    if node.runner == "local":
        try:
            return await _run_local(node, command, timeout)
        except TimeoutError:
            return CommandResult(returncode=-1, tail=f"(timed out after {timeout:g} s)")
    return await connection_pool().run(node, command, timeout=timeout,
                                       connect_deadline=connect_deadline)
