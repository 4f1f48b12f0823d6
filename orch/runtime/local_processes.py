"""Find and kill the processes of one local-cloud node.

Every process a local node runs inherits ``ORCH_LOCAL_NODE=<sandbox>`` (set by the local
command runner), including Ray's daemons and workers and the user's commands. Tearing a
node down kills exactly those processes, never a machine-wide ``ray stop``.
"""

from __future__ import annotations

from pathlib import Path

from orch.runtime.procfs import kill_all, related_pids
from orch.runtime.runner import LOCAL_NODE_MARKER


def has_marker(pid: int, home: str) -> bool:
    """Whether ``pid``'s environment names the local node ``home``."""
    needle = b"\0" + f"{LOCAL_NODE_MARKER}={home}".encode() + b"\0"
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False
    return needle in b"\0" + environ + b"\0"


def marked_pids(home: str) -> list[int]:
    """Pids of this node's live processes: those carrying the marker in their environment,
    and those related to one (see :func:`orch.runtime.procfs.related_pids`: some of Ray's
    processes overwrite what /proc shows of their environment, and some, the dashboard and
    runtime-env agents, outlive their raylet)."""
    return related_pids(lambda pid: has_marker(pid, home))


def kill_marked(home: str, grace_s: float = 2.0) -> int:
    """SIGTERM the node's processes, then SIGKILL what remains; returns how many there were."""
    return kill_all(lambda: marked_pids(home), grace_s)
