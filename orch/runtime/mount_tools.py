"""rclone and FUSE on a node, for its buckets: part of runtime setup, run for clusters
whose task has buckets, right after Ray's venv is in place (``mount_buckets``).

An SSH node without them gets Debian's packages ``rclone`` and ``fuse3`` with apt-get (its
login user has passwordless sudo on the clouds' stock images, as for ``python3-venv`` in
``orch.runtime.install``). Crash-safe as the rest of runtime setup: apt and dpkg install
whole packages or leave dpkg's own journal, which ``dpkg --configure -a`` finishes first,
so a retry after a worker or node killed mid-install converges. A local-cloud node is this
machine and installs nothing: what it lacks is named in the error (the suite's
``scripts/test`` installs both).

FUSE itself (``/dev/fuse``) cannot be installed; its absence is reported by the node
module for the mount that needs it (COPY needs only rclone).
"""

from __future__ import annotations

import shlex

from orch.clouds.base import NodeInfo
from orch.clouds.errors import SetupError
from orch.runtime.runner import CommandRunner

INSTALL_TIMEOUT_S = 900.0
_HAS = "command -v rclone >/dev/null && {fuse}"
_FUSE = "command -v fusermount3 >/dev/null || command -v fusermount >/dev/null"
_INSTALL = """\
command -v apt-get >/dev/null && sudo -n true 2>/dev/null || exit 1
export DEBIAN_FRONTEND=noninteractive
sudo -nE dpkg --configure -a
sudo -nE apt-get install -y -q {packages} \\
    || {{ sudo -nE apt-get update -q && sudo -nE apt-get install -y -q {packages}; }}
"""


def ensure_mount_tools(runner: CommandRunner, node: NodeInfo, fuse: bool) -> None:
    """rclone (and, for ``fuse``, fusermount3) on ``node``, installed if missing."""
    has = _HAS.format(fuse=f"{{ {_FUSE}; }}" if fuse else "true")
    if runner.run(has, timeout=60).ok:
        return
    packages = "rclone fuse3" if fuse else "rclone"
    if node.runner == "local":
        raise SetupError(f"node {node.instance_id}: the local cloud's nodes use this "
                         f"machine's rclone and FUSE; install them: apt-get install "
                         f"{packages}")
    result = runner.run(_INSTALL.format(packages=packages), timeout=INSTALL_TIMEOUT_S)
    if not result.ok or not runner.run(has, timeout=60).ok:
        raise SetupError(f"node {node.instance_id}: could not install {packages} for the "
                         f"task's buckets (apt-get with sudo, exit code {result.returncode})",
                         result.tail)


def node_module(node: NodeInfo, args: str) -> str:
    return f"{shlex.quote(node.python)} -m orch.runtime.mounts {args}"
