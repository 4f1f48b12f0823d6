"""SSH connections of the paramiko runner (``orch.runtime.ssh``): connecting, and the
process-wide pool.

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
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field

import paramiko

from orch.clouds.base import NodeInfo
from orch.runtime.commands import NodeUnreachableError
from orch.runtime.ssh_host_keys import HostKeyChangedError, TrustOnFirstUse

log = logging.getLogger(__name__)

DEFAULT_CONNECT_DEADLINE = 60.0  # seconds a runner keeps trying to reach an up node
ATTEMPT_TIMEOUT = 15.0  # one TCP connect, banner, key exchange or authentication
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0
KEEPALIVE_SECONDS = 30  # SSH-level keepalive, so NATs and firewalls keep idle connections
TCP_USER_TIMEOUT_MS = 90_000  # unacknowledged data this long means the peer is gone
IDLE_CLOSE_SECONDS = 120.0
READ_WAKEUP_SECONDS = 1.0


def connection_key(node: NodeInfo) -> str:
    """The pool key: one connection per ``user@host:port``."""
    return f"{_user(node)}@{node.address}:{node.ssh_port}"


def _user(node: NodeInfo) -> str:
    if not node.ssh_user:
        raise ValueError(f"node {node.instance_id} has no ssh_user")
    return node.ssh_user


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
    # No keys loaded into the client: every host's key goes to the policy, which checks it
    # against known_hosts as this process last parsed it. Loading the file into each client
    # parsed it whole on every connection, and paramiko takes the logging module's lock for
    # each line it parses: with 1,700 heads recorded, the node steps of 150 launches queued
    # on that lock for minutes and 2,000 managed jobs stalled (README, Performance).
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
    except BaseException:
        client.close()
        sock.close()
        raise
    transport = client.get_transport()
    assert transport is not None  # connect() succeeded
    transport.set_keepalive(KEEPALIVE_SECONDS)
    sock.settimeout(READ_WAKEUP_SECONDS)  # paramiko set 0.1 s: its thread's wake-ups
    return client


def _connect(node: NodeInfo, deadline: float) -> paramiko.SSHClient:
    """Connect to ``node``, retrying with exponential backoff for ``deadline`` seconds.

    The error raised names a refused key if any attempt saw one: that is why this node
    stays unreachable, whatever a later attempt, cut short by the deadline, said last."""
    pkey = paramiko.PKey.from_path(node.ssh_key_path) if node.ssh_key_path else None
    give_up = time.monotonic() + deadline
    backoff = FIRST_BACKOFF
    attempts = 0
    refused: paramiko.AuthenticationException | None = None
    while True:
        attempts += 1
        timeout = max(min(ATTEMPT_TIMEOUT, give_up - time.monotonic()), 0.1)
        try:
            return _handshake(node, pkey, timeout)
        except HostKeyChangedError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            error: Exception = exc
            if isinstance(exc, paramiko.AuthenticationException):
                refused = exc
        remaining = give_up - time.monotonic()
        if remaining <= 0:
            shown = refused or error
            raise NodeUnreachableError(
                f"cannot reach {connection_key(node)} over SSH after {attempts} attempts "
                f"in {deadline:g} s: {type(shown).__name__}: {shown}"
            ) from shown
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
