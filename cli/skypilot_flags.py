"""The flags of ``sky launch``/``sky exec``/``sky jobs launch`` that orch does not have.

A SkyPilot user's habit must get a reason, not typer's "No such option": these are found
in the arguments before typer parses them, and refused with exit 2 (the table of
docs/skypilot-compatibility.md lists them with the rest).
"""

from __future__ import annotations

from collections.abc import Sequence

REFUSED_FLAGS: dict[str, str] = {
    "--no-setup": "orch runs setup when it creates a cluster and never on a reused one",
    "--fast": "a reused UP cluster is already not provisioned again",
    "--clone-disk-from": "orch does not clone disks between clusters",
    "--async": "orch launch waits for the cluster; -d stops following the job's output",
    "--config": "orch reads its settings from $ORCH_HOME/config.yaml or ORCH_* variables "
                "(orch config show)",
    "--git-url": "orch syncs a local workdir; clone the repository in setup instead",
    "--git-ref": "orch syncs a local workdir; clone the repository in setup instead",
    "--pool": "orch has no worker pools for managed jobs",
}
COMMANDS = (("launch",), ("exec",), ("jobs", "launch"))


def refused_flag(argv: Sequence[str]) -> str | None:
    """The message for the first SkyPilot-only flag given to launch/exec/jobs launch."""
    words = [a for a in argv if not a.startswith("-")]
    if not any(tuple(words[:len(c)]) == c for c in COMMANDS):
        return None
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in REFUSED_FLAGS:
            return f"SkyPilot flag {flag} is not supported by orch: {REFUSED_FLAGS[flag]}"
    return None
