"""SSH host keys: trust on first use, shared by every SSH client orch runs.

Host keys. The first key a host shows is recorded in ``$ORCH_HOME/known_hosts``
(OpenSSH format, ``[host]:port`` for ports other than 22) and every later connection must
show the same key, else ``HostKeyChangedError``. Clouds reuse IP addresses, so whoever
terminates a node should ``forget_host_key(node)``.

Both SSH clients check keys here, against the file as this process last parsed it (parsed
again only when another process changed it): the paramiko runner (``orch.runtime.ssh``)
through :class:`TrustOnFirstUse`, the managed-job watch's asyncssh connections
(``orch.runtime.ssh_async``) through :func:`check_host_key`.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko

from orch.clouds.base import NodeInfo
from orch.config import orch_home

log = logging.getLogger(__name__)


class HostKeyChangedError(Exception):
    """The host shows a different key from the one recorded on first contact."""


def known_hosts_path() -> Path:
    return orch_home() / "known_hosts"


def host_key_name(node: NodeInfo) -> str:
    """How OpenSSH (and paramiko) name a host in known_hosts."""
    return node.address if node.ssh_port == 22 else f"[{node.address}]:{node.ssh_port}"


@contextmanager
def _known_hosts_locked() -> Iterator[Path]:
    """The known_hosts file, locked against other processes that record keys."""
    path = known_hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def load_known_hosts(path: Path | None = None) -> paramiko.HostKeys:
    path = path or known_hosts_path()
    keys = paramiko.HostKeys()
    if path.exists():
        keys.load(str(path))
    return keys


# known_hosts as this process last parsed it, by path: (the file's version, its keys).
# Every new connection checks its host's key, and parsing the whole file each time costs
# O(hosts) per connection: 2,000 watches connecting at once (a worker's restart) spent
# seconds of the event loop's CPU re-reading a file of 2,000 lines.
_PARSED: dict[Path, tuple[tuple[int, int, int], paramiko.HostKeys]] = {}


def _file_version(path: Path) -> tuple[int, int, int]:
    """What changes when the file does: appended to (size, mtime) or replaced (inode)."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _recorded_keys(path: Path) -> paramiko.HostKeys:
    """The keys in ``path``, parsed again only if the file changed since this process last
    read or wrote it. Call with the file locked (it may be changed only under the lock)."""
    if not path.exists():
        _PARSED.pop(path, None)
        return paramiko.HostKeys()
    version = _file_version(path)
    parsed = _PARSED.get(path)
    if parsed is None or parsed[0] != version:
        parsed = _PARSED[path] = (version, load_known_hosts(path))
    return parsed[1]


def changed_key_error(hostname: str, shown: paramiko.PKey) -> HostKeyChangedError:
    return HostKeyChangedError(
        f"host key for {hostname} changed: it now shows {shown.get_name()} "
        f"{shown.fingerprint}, which is not the key recorded in {known_hosts_path()}. "
        "Refusing to connect. If the machine was legitimately replaced, remove its line "
        "from that file (orch.runtime.ssh_host_keys.forget_host_key)."
    )


def check_host_key(hostname: str, key: paramiko.PKey) -> None:
    """Accept ``key`` for ``hostname`` if it is the recorded one, record it if none is,
    raise :class:`HostKeyChangedError` otherwise."""
    with _known_hosts_locked() as path:
        # Another process may have recorded this host since the caller read the file.
        keys = _recorded_keys(path)
        recorded = keys.lookup(hostname)
        if recorded is not None:
            if recorded.get(key.get_name()) == key:
                return
            raise changed_key_error(hostname, key)
        with open(path, "a") as known_hosts:
            known_hosts.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        keys.add(hostname, key.get_name(), key)
        _PARSED[path] = (_file_version(path), keys)  # the file is what was read plus this
    log.info("recorded host key %s %s for %s", key.get_name(), key.fingerprint, hostname)


class TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Checks every key through :func:`check_host_key`: the paramiko client is given no
    keys of its own, so paramiko asks this policy on every connection."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        check_host_key(hostname, key)


def forget_host_key(node: NodeInfo) -> None:
    """Drop the recorded key of ``node``'s address, e.g. when the node is terminated and its
    IP address may go to another machine."""
    hostname = host_key_name(node)
    with _known_hosts_locked() as path:
        keys = _recorded_keys(path)
        if keys.lookup(hostname) is None:
            return
        del keys[hostname]
        try:
            # Rewritten whole and renamed into place: a reader never sees half a file.
            partial = path.with_name(path.name + ".new")
            keys.save(str(partial))
            os.replace(partial, path)
        except BaseException:
            _PARSED.pop(path, None)  # the parsed copy no longer matches the file
            raise
        _PARSED[path] = (_file_version(path), keys)
