"""What a chaos run must never leave: local-cloud resources of clusters orch no longer
knows (leaks), and clusters with more nodes than they asked for (duplicates).

On the local cloud a cluster's resources are its node sandboxes,
``$ORCH_HOME/local/<name on cloud>/<instance>/``, and the processes carrying a node's
marker (``ORCH_LOCAL_NODE=<sandbox>``, see ``orch.runtime.local_processes``), with the
processes related to them. A process whose sandbox was removed still names it, so leaked
processes are found from /proc, not from the sandboxes left.
"""

from __future__ import annotations

from pathlib import Path

from orch.runtime.procfs import related_pids
from orch.runtime.runner import LOCAL_NODE_MARKER
from tests.e2e.conftest import Orch


def _directories(path: Path) -> list[Path]:
    """The directories in ``path``; none when it is gone (a teardown removes as we read)."""
    try:
        return sorted(entry for entry in path.iterdir() if entry.is_dir())
    except FileNotFoundError:
        return []


def sandboxes(cli: Orch) -> dict[str, list[str]]:
    """Name on cloud -> the node sandboxes under it, of every local-cloud cluster on disk."""
    return {cluster.name: [node.name for node in _directories(cluster)]
            for cluster in _directories(cli.home / "local")}


def _marked_node(pid: int, prefix: bytes) -> str | None:
    """The sandbox (its cluster's directory name) a process under ``prefix`` is marked with."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace").split("/", 1)[0]
    return None


def leaked_pids(cli: Orch, known: set[str]) -> list[int]:
    """Live processes of local nodes whose cluster (name on cloud) is not in ``known``."""
    prefix = f"{LOCAL_NODE_MARKER}={cli.home / 'local'}/".encode()

    def seed(pid: int) -> bool:
        cluster = _marked_node(pid, prefix)
        return cluster is not None and cluster not in known

    return related_pids(seed)


def known_clusters(cli: Orch) -> dict[str, int]:
    """Name on cloud -> node count, of every cluster ``orch status`` lists."""
    return {cli.cloud_name(c["name"]): int(c["num_nodes"]) for c in cli.json("status")}


def leaks(cli: Orch) -> list[str]:
    """Every sandbox and marked process of a cluster orch no longer lists."""
    known = known_clusters(cli)
    found = [f"sandbox {name}/{node}" for name, nodes in sandboxes(cli).items()
             if name not in known for node in nodes]
    found += [f"process {pid}" for pid in leaked_pids(cli, set(known))]
    return found


def duplicates(seen: dict[str, list[str]], num_nodes: int) -> list[str]:
    """Clusters (of a run whose clusters all have ``num_nodes`` nodes) seen with more."""
    return [f"{name}: {len(nodes)} nodes ({', '.join(nodes)})" for name, nodes in seen.items()
            if len(nodes) > num_nodes]
