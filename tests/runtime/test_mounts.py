"""The node's side of buckets (``python -m orch.runtime.mounts``), run as a node runs it,
with real rclone and FUSE on this machine and the local store's rclone remote (a
directory): a mount is made once, kept when it answers, replaced when its rclone died,
unmounted and forgotten; COPY reports progress; a node without FUSE is told which mount
needs it. Skipped, with the reason, where rclone or FUSE is missing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orch.runtime.mounts import ERROR, FAILED, PROGRESS, NodeMount, NodeMounts, mounted
from orch.runtime.rclone_commands import config_text, mount_command
from tests.e2e.test_storage import FUSE_MISSING

pytestmark = pytest.mark.skipif(FUSE_MISSING is not None, reason=FUSE_MISSING or "")


def node(home: Path, action: str, mounts: list[NodeMount], path: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    """The module on a "node" whose home is ``home``, as the mount activity runs it."""
    spec = home / "spec.json"
    spec.write_text(NodeMounts(mounts=mounts).model_dump_json())
    env = {**os.environ, "HOME": str(home)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "orch.runtime.mounts", action, str(spec)],
                          env=env, capture_output=True, text=True, timeout=120)


def bucket_mount(home: Path, bucket: Path, mode: str, path: str = "~/ckpt") -> NodeMount:
    """A mount of the directory ``bucket`` with its own config file, as the worker sends."""
    config = home / f"rclone-{mode}.conf"
    config.write_text(config_text("local", {}))
    config.chmod(0o600)
    return NodeMount(path=path, mode=mode, uri=f"local://{bucket.name}",
                     remote_path=str(bucket), config=str(config), cache_limit="1G")


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    directory = tmp_path / "storage" / "ckpt-bucket"
    directory.mkdir(parents=True)
    (directory / "step-0001").write_text("1\n")
    return directory


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_a_mount_is_made_once_kept_while_it_answers_and_replaced_when_its_rclone_died(
    home: Path, bucket: Path,
) -> None:
    target = home / "ckpt"
    first = node(home, "mount", [bucket_mount(home, bucket, "MOUNT")])
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert mounted(target) and (target / "step-0001").read_text() == "1\n"
        (target / "step-0002").write_text("2\n")  # write-through
        assert (bucket / "step-0002").read_text() == "2\n"
        assert not (home / "rclone-MOUNT.conf").exists()  # read once by rclone, removed

        again = node(home, "mount", [bucket_mount(home, bucket, "MOUNT")])
        assert json.loads(again.stdout.splitlines()[-1]) == ["~/ckpt: already mounted"]

        record = json.loads(next((home / ".orch-node/mounts").glob("*.json")).read_text())
        os.kill(record["pid"], signal.SIGKILL)  # a stopped node: its rclone is gone
        revived = node(home, "mount", [bucket_mount(home, bucket, "MOUNT")])
        assert "mounted local://ckpt-bucket (MOUNT)" in revived.stdout, revived.stdout
        assert (target / "step-0002").read_text() == "2\n"
    finally:
        done = node(home, "unmount", [bucket_mount(home, bucket, "MOUNT")])
    assert json.loads(done.stdout.splitlines()[-1]) == [f"{target}: unmounted"]
    assert not mounted(target) and not list((home / ".orch-node/mounts").glob("*.json"))


def test_copy_downloads_with_progress_and_a_cached_mount_writes_back_on_unmount(
    home: Path, bucket: Path,
) -> None:
    (bucket / "big.bin").write_bytes(os.urandom(3 << 20))
    copied = node(home, "mount", [bucket_mount(home, bucket, "COPY", "~/data")])
    assert copied.returncode == 0, copied.stdout
    assert f"{PROGRESS} ~/data 100%" in copied.stdout
    assert (home / "data" / "big.bin").read_bytes() == (bucket / "big.bin").read_bytes()
    assert not mounted(home / "data")

    cached = node(home, "mount", [bucket_mount(home, bucket, "MOUNT_CACHED", "~/cache")])
    assert cached.returncode == 0, cached.stdout
    (home / "cache" / "late.txt").write_text("written back\n")
    node(home, "unmount", [bucket_mount(home, bucket, "MOUNT_CACHED", "~/cache")])
    assert (bucket / "late.txt").read_text() == "written back\n"


def test_a_node_without_fuse_names_the_mount_that_needs_it(home: Path, bucket: Path,
                                                           tmp_path: Path) -> None:
    tools = tmp_path / "tools"  # rclone, but no fusermount
    tools.mkdir()
    rclone = shutil.which("rclone")
    assert rclone is not None
    (tools / "rclone").symlink_to(rclone)
    path = f"{tools}:/usr/local/sbin:/sbin"

    refused = node(home, "mount", [bucket_mount(home, bucket, "MOUNT")], path=path)

    assert refused.returncode == FAILED
    assert (f"{ERROR} cannot mount local://ckpt-bucket at ~/ckpt (MOUNT): FUSE is missing "
            "on this node (no fusermount3 (fuse3)); use mode: COPY") in refused.stdout
    assert node(home, "mount", [bucket_mount(home, bucket, "COPY", "~/data")],
                path=path).returncode == 0  # COPY needs no FUSE


def test_the_mount_commands_are_skypilots() -> None:
    plain = mount_command("b/p", "/ckpt", "/c.conf", "/l.log", cached=False, cache_dir="/cd",
                          cache_limit="10G")
    assert plain[:4] == ["rclone", "mount", "orch:b/p", "/ckpt"]
    assert {"--daemon", "--allow-non-empty"} <= set(plain)
    assert plain[plain.index("--vfs-cache-mode") + 1] == "off"
    cached = mount_command("b/p", "/ckpt", "/c.conf", "/l.log", cached=True, cache_dir="/cd",
                           cache_limit="10G")
    for flag, value in (("--vfs-cache-mode", "full"), ("--vfs-cache-max-size", "10G"),
                        ("--cache-dir", "/cd"), ("--vfs-write-back", "1s")):
        assert cached[cached.index(flag) + 1] == value
