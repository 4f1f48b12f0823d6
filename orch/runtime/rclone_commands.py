"""The rclone command lines for a node's buckets, the kind SkyPilot runs
(``sky/data/mounting_utils.py``): pure, so that they can be read and tested as they are.

* MOUNT: ``rclone mount`` with ``--vfs-cache-mode off``: reads stream from the bucket and
  writes go straight to it as they are written (write-through: a file is in the bucket
  once closed; random writes and appends are not supported, as with SkyPilot's MOUNT).
  Directory listings are cached 5 s, so files other nodes write show up soon.
* MOUNT_CACHED: ``rclone mount`` with ``--vfs-cache-mode full``, a cache of its own per
  mount capped at ``--vfs-cache-max-size`` (rclone evicts beyond it), written back 1 s
  after a file is closed: SkyPilot's flags.
* COPY: ``rclone copy`` (``copyto`` for one object) with one stats line every 2 s, which
  the node module turns into progress.

Every command names its own config file (``--config``), written 0600 by the worker for
this mount, with the remote called ``orch``: credentials never appear on a command line.
"""

from __future__ import annotations

import hashlib
import shlex

REMOTE = "orch"  # the remote's name in each mount's config file
STATS_EVERY = "2s"


def mount_id(path: str) -> str:
    """A short stable name for a mount path (its files: config, log, cache, record)."""
    return hashlib.sha256(path.encode()).hexdigest()[:16]


def config_text(remote_type: str, options: dict[str, str]) -> str:
    """An rclone config file holding one remote, ``orch``."""
    lines = [f"[{REMOTE}]", f"type = {remote_type}"]
    lines += [f"{key} = {value}" for key, value in sorted(options.items())]
    return "\n".join(lines) + "\n"


def mount_command(remote_path: str, mount_path: str, config: str, log: str, *,
                  cached: bool, cache_dir: str, cache_limit: str) -> list[str]:
    """``rclone mount``, daemonized: it returns once the mount serves (or failed)."""
    command = ["rclone", "mount", f"{REMOTE}:{remote_path}", mount_path, "--config", config,
               "--daemon", "--daemon-wait", "30s", "--allow-non-empty",
               "--log-file", log, "--log-level", "INFO"]
    if cached:
        return command + ["--vfs-cache-mode", "full", "--vfs-cache-max-size", cache_limit,
                          "--cache-dir", cache_dir, "--vfs-write-back", "1s",
                          "--dir-cache-time", "10s", "--vfs-cache-poll-interval", "10s",
                          "--vfs-fast-fingerprint"]
    return command + ["--vfs-cache-mode", "off", "--dir-cache-time", "5s"]


def copy_command(remote_path: str, destination: str, config: str, *, one_object: bool
                 ) -> list[str]:
    """``rclone copy`` of a prefix into a directory, or ``copyto`` of one object."""
    verb = "copyto" if one_object else "copy"
    return ["rclone", verb, f"{REMOTE}:{remote_path}", destination, "--config", config,
            "--stats", STATS_EVERY, "--stats-one-line", "--stats-log-level", "NOTICE"]


def stat_command(remote_path: str, config: str) -> list[str]:
    """What the remote path is (``IsDir``), as JSON; fails when there is nothing."""
    return ["rclone", "lsjson", "--stat", f"{REMOTE}:{remote_path}", "--config", config]


def shown(command: list[str]) -> str:
    return " ".join(shlex.quote(word) for word in command)
