"""A node's buckets: ``python -m orch.runtime.mounts mount|unmount SPEC`` on the node.

``mount`` brings each bucket of the spec (a JSON :class:`NodeMounts`, no secret in it) to
its path: COPY downloads it with ``rclone copy``, printing ``orch-progress:`` lines; MOUNT
and MOUNT_CACHED run ``rclone mount`` as a daemon (``orch.runtime.rclone_commands``). Each
mount's rclone config (the remote and its credentials) is a 0600 file the worker wrote
beside the spec; it is removed as soon as rclone has read it, so credentials live on only
in the rclone process.

Crash-safe and idempotent, as the rest of the node's steps: a mount's record
(``~/.orch-node/mounts/<id>.json``) is written before ``rclone mount`` starts; a path
already mounted by its record's bucket and answering is left as it is (a relaunch on an
UP cluster), anything else mounted there (a mount whose rclone died with a stopped node,
a half-made one) is unmounted first. ``unmount`` unmounts every recorded mount (``--all``)
or the spec's (a cached one once its files are written back, for at most two minutes: what
is left stays in its cache, which rclone uploads from when it is mounted again), waits for
its rclone to exit, and forgets it.

Exit code 3 and an ``orch-mount-error:`` line name the mount that could not be made: no
FUSE on the node, no rclone, a bucket that cannot be read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from orch.runtime.procfs import alive, command_line
from orch.runtime.rclone_commands import (
    copy_command,
    mount_command,
    mount_id,
    stat_command,
)

NODE_DIR = Path("~/.orch-node").expanduser()
RECORDS = NODE_DIR / "mounts"
CACHE = NODE_DIR / "rclone-cache"
PROGRESS = "orch-progress:"
ERROR = "orch-mount-error:"
FAILED = 3
_STATS = re.compile(r"([\d.]+ \S*B) / ([\d.]+ \S*B), (\d+)%")
UNMOUNT_WAIT_S = 120.0  # for a cached mount's last write-backs
FIRST_LISTING_S = 90  # rclone retries a while before it says a bucket cannot be reached


class NodeMount(BaseModel):
    """One bucket for this node (plain strings: the node imports nothing else of orch's)."""

    path: str  # as the task wrote it: absolute or ~/...
    mode: str  # MOUNT, MOUNT_CACHED or COPY
    uri: str  # the bucket, for messages
    remote_path: str  # bucket/prefix as rclone's remote sees it
    config: str = ""  # this mount's rclone config file on the node
    cache_limit: str = "10G"


class NodeMounts(BaseModel):
    mounts: list[NodeMount]


class MountRecord(BaseModel):
    path: str  # expanded
    mode: str
    uri: str
    remote_path: str
    pid: int | None = None  # the rclone daemon serving it


class MountFailure(Exception):
    pass


def rclone(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """``command`` and its environment: rclone 1.60 fails on ``AWS_CA_BUNDLE`` (its AWS SDK
    cannot load it into rclone's transport), so the bundle is given as ``--ca-cert``."""
    env = dict(os.environ)
    bundle = env.pop("AWS_CA_BUNDLE", None)
    return (command + ["--ca-cert", bundle] if bundle else command), env


def _target(path: str) -> Path:
    return Path(os.path.expanduser(path))


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted(target: Path) -> bool:
    """Whether ``target`` is a mount point now (a dead FUSE mount included)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(_unescape(line.split()[4]) == str(target) for line in lines if line.split())


def answering(target: Path) -> bool:
    try:
        os.listdir(target)
    except OSError:  # ENOTCONN: its rclone is gone
        return False
    return True


def _record_file(target: Path) -> Path:
    return RECORDS / f"{mount_id(str(target))}.json"


def _read_record(target: Path) -> MountRecord | None:
    try:
        return MountRecord.model_validate_json(_record_file(target).read_text())
    except (OSError, ValueError):
        return None


def _write_record(record: MountRecord) -> None:
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = _record_file(Path(record.path))
    partial = path.with_suffix(".partial")
    partial.write_text(record.model_dump_json())
    partial.replace(path)


def _rclone_pid(target: Path) -> int | None:
    """The ``rclone mount`` serving ``target``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            words = command_line(int(entry.name))
            if words[:1] and words[0].endswith("rclone") and "mount" in words \
                    and str(target) in words:
                return int(entry.name)
    return None


def unmount_path(target: Path, pid: int | None) -> None:
    """Unmount (lazily when busy) and wait for its rclone to write back and exit."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    if mounted(target):
        done = subprocess.run([fusermount, "-u", str(target)], capture_output=True)
        if done.returncode != 0 and mounted(target):
            subprocess.run([fusermount, "-uz", str(target)], capture_output=True)
    deadline = time.monotonic() + UNMOUNT_WAIT_S
    while pid and alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def _need(mount: NodeMount, fuse: bool) -> None:
    what = f"{mount.uri} at {mount.path} ({mount.mode})"
    if shutil.which("rclone") is None:
        raise MountFailure(f"cannot attach {what}: rclone is not installed on this node")
    if fuse and not (Path("/dev/fuse").exists() and (shutil.which("fusermount3")
                                                     or shutil.which("fusermount"))):
        missing = "/dev/fuse" if not Path("/dev/fuse").exists() else "fusermount3 (fuse3)"
        raise MountFailure(f"cannot mount {what}: FUSE is missing on this node (no "
                           f"{missing}); use mode: COPY, or an image with FUSE")


def _make_dir(target: Path) -> None:
    try:
        target.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        user = f"{os.getuid()}:{os.getgid()}"
        made = subprocess.run(f"sudo -n mkdir -p '{target}' && sudo -n chown {user} '{target}'",
                              shell=True, capture_output=True, text=True)
        if made.returncode != 0:
            raise MountFailure(f"cannot create the mount path {target}: permission denied "
                               "(and no passwordless sudo)") from None


def _log_tail(log: Path) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(log.read_text(errors="replace").splitlines()[-5:])
    return ""


def mount_one(mount: NodeMount) -> str:
    _need(mount, fuse=True)
    target = _target(mount.path)
    record = _read_record(target)
    if mounted(target):
        same = record is not None and (record.remote_path, record.mode) == (
            mount.remote_path, mount.mode)
        if same and answering(target):
            return f"{mount.path}: already mounted"
        unmount_path(target, record.pid if record else None)
    _make_dir(target)
    ident = mount_id(str(target))
    log = RECORDS / f"{ident}.log"
    _write_record(MountRecord(path=str(target), mode=mount.mode, uri=mount.uri,
                              remote_path=mount.remote_path))
    command = mount_command(mount.remote_path, str(target), mount.config, str(log),
                            cached=mount.mode == "MOUNT_CACHED",
                            cache_dir=str(CACHE / ident), cache_limit=mount.cache_limit)
    # Its output to the log, never a pipe: the daemon would hold a pipe open forever.
    command, env = rclone(command)
    with log.open("a") as out:
        done = subprocess.run(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                              env=env)
    if done.returncode != 0 or not mounted(target):
        raise MountFailure(f"rclone could not mount {mount.uri} at {mount.path} (exit code "
                           f"{done.returncode}): {_log_tail(log)[-600:]}")
    # rclone mounts without reading the bucket: list it once, so that a bucket the node
    # cannot reach fails here, naming the mount, not as I/O errors in the task.
    listing = subprocess.run(["timeout", "-s", "KILL", str(FIRST_LISTING_S), "ls",
                              str(target)], capture_output=True, text=True)
    if listing.returncode != 0:
        unmount_path(target, _rclone_pid(target))
        raise MountFailure(f"{mount.uri} mounted at {mount.path} cannot be read from this "
                           f"node: {_log_tail(log)[-600:] or listing.stderr.strip()}")
    _write_record(MountRecord(path=str(target), mode=mount.mode, uri=mount.uri,
                              remote_path=mount.remote_path, pid=_rclone_pid(target)))
    return f"{mount.path}: mounted {mount.uri} ({mount.mode})"


def copy_one(mount: NodeMount) -> str:
    _need(mount, fuse=False)
    target = _target(mount.path)
    command, env = rclone(stat_command(mount.remote_path, mount.config))
    stat = subprocess.run(command, capture_output=True, text=True, env=env)
    if stat.returncode != 0:
        raise MountFailure(f"cannot read {mount.uri} for {mount.path}: "
                           f"{stat.stderr.strip()[-600:]}")
    one_object = not json.loads(stat.stdout or "{}").get("IsDir", True)
    (target.parent if one_object else target).mkdir(parents=True, exist_ok=True)
    command, env = rclone(copy_command(mount.remote_path, str(target), mount.config,
                                       one_object=one_object))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, stdin=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    last = ""
    for line in process.stdout:
        last = line.strip() or last
        found = _STATS.search(line)
        if found:
            done, total, percent = found.groups()
            print(f"{PROGRESS} {mount.path} {percent}% ({done} of {total})", flush=True)
    if process.wait() != 0:
        raise MountFailure(f"copying {mount.uri} to {mount.path} failed: {last[-600:]}")
    return f"{mount.path}: copied {mount.uri}"


def mount_all(spec: NodeMounts) -> list[str]:
    done = []
    for mount in spec.mounts:
        try:
            done.append(copy_one(mount) if mount.mode == "COPY" else mount_one(mount))
        finally:
            with contextlib.suppress(OSError):
                Path(mount.config).unlink()  # rclone has read it
    return done


def dirty_files(cache: Path) -> int:
    """Files a cached mount holds that its bucket does not have yet (rclone's cache
    metadata says ``Dirty`` until the write-back is done)."""
    count = 0
    for meta in (cache / "vfsMeta").rglob("*") if (cache / "vfsMeta").is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            count += bool(meta.is_file() and json.loads(meta.read_text()).get("Dirty"))
    return count


def _written_back(cache: Path) -> None:
    """Wait (bounded) until a cached mount has written every file back."""
    deadline = time.monotonic() + UNMOUNT_WAIT_S
    while dirty_files(cache) and time.monotonic() < deadline:
        time.sleep(0.5)


def unmount_all(paths: list[str] | None) -> list[str]:
    """Unmount the recorded mounts (those at ``paths``, or all) and forget them."""
    wanted = {str(_target(p)) for p in paths} if paths is not None else None
    done = []
    for file in sorted(RECORDS.glob("*.json")) if RECORDS.is_dir() else []:
        try:
            record = MountRecord.model_validate_json(file.read_text())
        except (OSError, ValueError):
            file.unlink(missing_ok=True)
            continue
        if wanted is not None and record.path not in wanted:
            continue
        target, cache = Path(record.path), CACHE / file.stem
        if record.mode == "MOUNT_CACHED" and mounted(target):
            _written_back(cache)  # bounded: what is left stays in the cache
        unmount_path(target, record.pid or _rclone_pid(target))
        if mounted(target):
            done.append(f"{record.path}: still mounted")
            continue
        if dirty_files(cache):  # rclone uploads them when this cache is mounted again
            done.append(f"{record.path}: unmounted, {dirty_files(cache)} file(s) not yet "
                        "written back kept in its cache")
        else:
            shutil.rmtree(cache, ignore_errors=True)
            done.append(f"{record.path}: unmounted")
        file.unlink(missing_ok=True)
    return done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orch.runtime.mounts")
    parser.add_argument("action", choices=["mount", "unmount"])
    parser.add_argument("spec", nargs="?", help="a NodeMounts JSON file")
    parser.add_argument("--all", action="store_true", help="unmount: every recorded mount")
    args = parser.parse_args(argv)
    spec = NodeMounts.model_validate_json(Path(args.spec).read_text()) if args.spec else None
    try:
        if args.action == "mount":
            assert spec is not None, "mount needs a spec"
            done = mount_all(spec)
        else:
            done = unmount_all(None if args.all or spec is None
                               else [m.path for m in spec.mounts])
    except MountFailure as failure:
        print(f"{ERROR} {failure}", flush=True)
        sys.exit(FAILED)
    print(json.dumps(done))


if __name__ == "__main__":
    main()
