"""The local cloud as a chaos lane sees it: what a run must never leave there (leaks) and
how many nodes each cluster has (for duplicates).

On the local cloud a cluster's resources are its node sandboxes,
``$ORCH_HOME/local/<name on cloud>/<instance>/``, and the processes carrying a node's
marker (``ORCH_LOCAL_NODE=<sandbox>``, see ``orch.runtime.local_processes``), with the
processes related to them. A process whose sandbox was removed still names it, so leaked
processes are found from /proc, not from the sandboxes left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orch.runtime.procfs import related_pids
from orch.runtime.runner import LOCAL_NODE_MARKER
from tests.chaos.stories import Scene
from tests.e2e.conftest import Orch


def _directories(path: Path) -> list[Path]:
    """The directories in ``path``; none when it is gone (a teardown removes as we read)."""
    try:
        return sorted(entry for entry in path.iterdir() if entry.is_dir())
    except FileNotFoundError:
        return []


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


def node_processes(home: Path, wanted: Callable[[str], bool] = lambda cluster: True
                   ) -> list[int]:
    """Live processes of the local nodes of ``home`` whose cluster (name on cloud) is
    ``wanted``."""
    prefix = f"{LOCAL_NODE_MARKER}={home / 'local'}/".encode()

    def seed(pid: int) -> bool:
        cluster = _marked_node(pid, prefix)
        return cluster is not None and wanted(cluster)

    return related_pids(seed)


class LocalWorld:
    """The embedded local cloud of the lane's ORCH_HOME: nothing to set up."""

    cloud = "local"

    def env(self) -> dict[str, str]:
        return {}

    @contextmanager
    def around(self, scene: Scene) -> Iterator[None]:
        yield

    def nodes(self, cli: Orch) -> dict[str, list[str]]:
        """Name on cloud -> the node sandboxes under it, of every cluster on disk."""
        return {cluster.name: [node.name for node in _directories(cluster)]
                for cluster in _directories(cli.home / "local")}

    def left_of(self, cli: Orch, cloud_name: str) -> list[str]:
        found = [f"sandbox {node}" for node in self.nodes(cli).get(cloud_name, [])]
        pids = node_processes(cli.home, lambda cluster: cluster == cloud_name)
        return found + [f"process {pid}" for pid in pids]

    def leaks(self, cli: Orch, known: set[str]) -> list[str]:
        found = [f"sandbox {name}/{node}" for name, nodes in self.nodes(cli).items()
                 if name not in known for node in nodes]
        pids = node_processes(cli.home, lambda cluster: cluster not in known)
        return found + [f"process {pid}" for pid in pids]
