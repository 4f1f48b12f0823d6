"""What ``ray_node start`` is about to start on this node, written down before it starts
it, so that whatever a failed or cut-short start left can be found and stopped.

The intent file is ``~/.orch-node/ray.json`` (the node's orch directory; on the local cloud
under the node's sandbox home). :func:`orch.runtime.ray_node.start` writes it (atomically:
a temporary file renamed over it) before it runs ``ray start``, with ``started`` false,
and writes it again with ``started`` true once ``ray start`` has returned 0. It holds:

* ``head``, ``ip`` and ``gcs_address``: the GCS the head serves (``ip:port``), or the head's
  that a worker joins;
* ``temp_dir`` (local nodes: a Ray temp dir of the node's own) and ``ports``, every port
  flag passed to ``ray start``;
* ``pid`` and ``pid_start_time``, the ``ray_node`` process that runs ``ray start`` (the
  start time tells it from a later process given the same pid), and ``recorded_at``;
* ``local_node``: the sandbox of a local-cloud node.

It is read by the next ``ray_node start`` on the node (to reuse a completed start or stop
what an earlier one left) and by ``ray_node stop``. A file from before intents existed
(``gcs_address`` and ``ip`` only) was written after a successful start, and reads as one.

:func:`intent_pids` finds the intent's processes without ``ray stop``, which looks for Ray's
process names machine-wide and, for a start that died half-way, may miss what was started
with another temp dir or kill a user's own Ray: a process is the intent's when it runs as
this user (on the local cloud: carries the node's marker) and is the recorded ``ray_node``,
or its command line names the intent's temp dir or GCS address, or it is the GCS server or
the head's ``ray start`` for the intent's port and address; with everything related to those
(:func:`orch.runtime.procfs.related_pids`).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from orch.runtime.local_processes import has_marker
from orch.runtime.procfs import command_line, kill_all, related_pids, start_time

INTENT_FILE = Path("~/.orch-node/ray.json").expanduser()


class RayIntent(BaseModel):
    gcs_address: str | None = None  # None only for the fallback of a node with no file
    ip: str
    head: bool | None = None  # None: a file from before intents (head or worker)
    temp_dir: str | None = None
    ports: dict[str, int] = Field(default_factory=dict)  # ray start's flag name -> port
    pid: int | None = None
    pid_start_time: int | None = None
    recorded_at: float | None = None
    local_node: str | None = None
    started: bool = True  # files from before intents were written after a successful start

    @property
    def port(self) -> str | None:
        """The GCS port a head serves (a file from before intents may be a head's)."""
        if self.head is False or not self.gcs_address:
            return None
        return self.gcs_address.rsplit(":", 1)[1]


def read_intent() -> RayIntent | None:
    try:
        return RayIntent.model_validate_json(INTENT_FILE.read_text())
    except (OSError, ValidationError):
        return None


def record_intent(intent: RayIntent) -> None:
    INTENT_FILE.parent.mkdir(parents=True, exist_ok=True)
    partial = INTENT_FILE.with_name(INTENT_FILE.name + ".partial")
    partial.write_text(intent.model_dump_json())
    os.replace(partial, INTENT_FILE)


def forget_intent() -> None:
    INTENT_FILE.unlink(missing_ok=True)


def _on_this_node(pid: int, intent: RayIntent) -> bool:
    if intent.local_node:
        return has_marker(pid, intent.local_node)
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def _names_intent(args: list[str], intent: RayIntent) -> bool:
    """Whether a command line is one of the intent's Ray processes (see the docstring)."""
    if intent.temp_dir and any(intent.temp_dir in arg for arg in args):
        return True
    if intent.gcs_address and any(arg == intent.gcs_address
                                  or arg.endswith("=" + intent.gcs_address) for arg in args):
        return True
    if intent.port is None or f"--node-ip-address={intent.ip}" not in args:
        return False
    gcs_server = bool(args) and args[0].endswith("/gcs_server")
    return (gcs_server and f"--gcs_server_port={intent.port}" in args) or (
        "start" in args and f"--port={intent.port}" in args)


def _is_seed(pid: int, intent: RayIntent) -> bool:
    if not _on_this_node(pid, intent):
        return False
    if pid == intent.pid and start_time(pid) == intent.pid_start_time:
        return True
    return _names_intent(command_line(pid), intent)


def intent_pids(intent: RayIntent) -> list[int]:
    """The live processes of what ``intent`` started (or was about to)."""
    return related_pids(lambda pid: _is_seed(pid, intent))


def stop_intent(intent: RayIntent) -> int:
    """Kill the intent's processes until none is left; returns how many there were."""
    return kill_all(lambda: intent_pids(intent))
