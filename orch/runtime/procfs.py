"""This machine's processes, read from /proc (Linux): whether one is alive (a zombie counts
as gone), which belong together, and killing a set of them until none is left.

A set of processes is found from seeds (a predicate on a pid) by :func:`related_pids`: the
seeds, every process sharing a session with one, and their descendants. Sessions matter
because Ray's Python processes rename themselves with setproctitle (which overwrites what
/proc shows of their command line and environment) and the daemons ``ray start`` leaves
are reparented once it exits, but they keep the session of the command that started them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    except PermissionError:  # someone else's, and there
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot: with the pid, names one process
    even after the number is reused. None when it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


def command_line(pid: int) -> list[str]:
    """The arguments of ``pid`` (empty when it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if fields and fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[4]))
    return table


def ancestors() -> set[int]:
    """This process and its parents: a command that kills a node's processes (a node's own
    ``ray_node stop``) must not kill itself or the shell that runs it."""
    pids, pid = set(), os.getpid()
    while pid > 1 and (fields := _stat_fields(pid)):
        pids.add(pid)
        pid = int(fields[1])
    return pids


def related_pids(is_seed: Callable[[int], bool]) -> list[int]:
    """The seeds, the processes sharing a session with one, and all their descendants;
    never this process, its parents, or the members of their sessions."""
    spared = ancestors()
    table = process_table()
    seeds = {pid for pid in table if pid not in spared and is_seed(pid)}
    sessions = {table[pid][1] for pid in seeds} - {table[p][1] for p in spared if p in table}
    found = seeds | {pid for pid, (_, sid) in table.items() if sid in sessions}
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


def kill_all(find: Callable[[], list[int]], grace_s: float = 2.0) -> int:
    """SIGTERM what ``find`` returns, then SIGKILL what remains; returns how many there
    were. Repeats until ``find`` returns nothing (or 20 rounds), since Ray's raylet may
    start a worker while we kill."""
    first = find()
    for pid in first:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while find() and time.monotonic() < deadline:
        time.sleep(0.1)
    for _ in range(20):
        left = find()
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.1)
    return len(first)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
