"""Find and kill the processes of one local-cloud node.

Every process a local node runs inherits ``ORCH_LOCAL_NODE=<sandbox>`` (set by the local
command runner), including Ray's daemons and workers and the user's commands. Tearing a
node down kills exactly those processes, never a machine-wide ``ray stop``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from orch.runtime.runner import LOCAL_NODE_MARKER


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[4]))
    return table


def _has_marker(pid: int, needle: bytes) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False
    return needle in b"\0" + environ + b"\0"


def marked_pids(home: str) -> list[int]:
    """Pids of this node's live processes.

    A process carries the marker in its environment, or shares a session with one that
    does, or descends from one. The last two matter because Ray's Python processes
    rename themselves with setproctitle, which overwrites what /proc shows of their
    environment, and some (the dashboard and runtime-env agents) outlive their raylet.
    """
    needle = b"\0" + f"{LOCAL_NODE_MARKER}={home}".encode() + b"\0"
    spared = _ancestors()
    table = _process_table()
    marked = {pid for pid in table if pid not in spared and _has_marker(pid, needle)}
    sessions = {table[pid][1] for pid in marked} - {table[pid][1] for pid in spared if pid in table}
    found = marked | {pid for pid, (_, sid) in table.items() if sid in sessions}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return sorted(found - spared)


def _ancestors() -> set[int]:
    """This process and its parents: a node's own ``stop-ray`` command must not kill itself."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def kill_marked(home: str, grace_s: float = 2.0) -> int:
    """SIGTERM the node's processes, then SIGKILL what remains; returns how many there were.

    Repeats until none is left, since Ray's raylet may start a worker while we kill.
    """
    first = marked_pids(home)
    for pid in first:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while marked_pids(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    for _ in range(20):
        left = marked_pids(home)
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.1)
    return len(first)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
