"""SSHRunner against a real sshd on 127.0.0.1 (see tests/fakes/sshd.py).

The sshd logs in as the user running the tests on this same machine, so a test can look
at the "remote" side directly: files, modes, processes.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import paramiko
import pytest

from orch.clouds.base import NodeInfo
from orch.runtime.commands import NodeUnreachableError
from orch.runtime.ssh import SSHRunner, wait_for_ssh
from orch.runtime.ssh_connect import POOL
from orch.runtime.ssh_host_keys import (
    HostKeyChangedError,
    TrustOnFirstUse,
    forget_host_key,
    known_hosts_path,
)
from tests.fakes.sshd import Sshd, free_port, keygen

pytestmark = pytest.mark.usefixtures("ssh_isolated")

NodeFor = Callable[[Sshd | int], NodeInfo]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], what: str, limit: float = 15.0) -> None:
    give_up = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < give_up, f"still waiting for: {what}"
        time.sleep(0.05)


def snapshot(root: Path) -> dict[str, tuple]:
    """Type, mode, mtime (whole seconds), content or link target of every entry."""
    entries: dict[str, tuple] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            payload: object = os.readlink(path)
        elif path.is_dir():
            payload = None
        else:
            payload = path.read_bytes()
        mtime = None if path.is_dir() or path.is_symlink() else int(info.st_mtime)
        entries[str(path.relative_to(root))] = (
            stat.S_IFMT(info.st_mode),
            None if path.is_symlink() else stat.S_IMODE(info.st_mode),
            mtime,
            payload,
        )
    return entries


def change_times(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_ctime_ns for p in root.rglob("*")}


def make_tree(root: Path) -> Path:
    (root / "data" / "nested").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "secret").write_text("s3cret")
    (root / "secret").chmod(0o600)
    (root / "data" / "nested" / "deep.txt").write_text("deep\n" * 1000)
    (root / "data" / "nested" / "deep.txt").chmod(0o640)
    (root / "data").chmod(0o750)
    (root / "link").symlink_to("run.sh")
    return root


# --- run ----------------------------------------------------------------------------------


def test_run_combines_output_in_order_and_returns_the_exit_code(sshd: Sshd, ssh_node: NodeFor):
    lines: list[str] = []
    with SSHRunner(ssh_node(sshd)) as runner:
        result = runner.run(
            "echo out1; echo err1 >&2; echo out2; printf 'no newline'; exit 7",
            on_line=lines.append,
        )
    assert lines == ["out1", "err1", "out2", "no newline"]
    assert result.returncode == 7 and not result.ok
    assert result.tail == "out1\nerr1\nout2\nno newline"


def test_run_streams_lines_while_the_command_runs(sshd: Sshd, ssh_node: NodeFor, tmp_path):
    """The command waits for a file that on_line creates when it sees the first line: it
    only finishes if lines arrive while it runs."""
    ack = tmp_path / "ack"
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if line == "waiting":
            ack.touch()

    with SSHRunner(ssh_node(sshd)) as runner:
        result = runner.run(
            f"echo waiting; until [ -e {ack} ]; do sleep 0.05; done; echo acked",
            on_line=on_line,
            timeout=60,
        )
    assert result.ok and lines == ["waiting", "acked"]


def test_run_exports_env_values_verbatim(sshd: Sshd, ssh_node: NodeFor, tmp_path: Path):
    values = {
        "PLAIN": "x",
        "TRICKY": "it's $(touch /tmp/pwned) `id` \"q\" \\ ; | & * \nsecond line",
        "EMPTY": "",
    }
    with SSHRunner(ssh_node(sshd)) as runner:
        for name in values:
            runner.check(f'printf %s "${name}" > {tmp_path / name}', env=values)
        with pytest.raises(ValueError, match="invalid environment variable name"):
            runner.run("true", env={"BAD NAME": "x"})
    assert {name: (tmp_path / name).read_text() for name in values} == values


def test_run_uses_a_login_shell(sshd: Sshd, ssh_node: NodeFor):
    with SSHRunner(ssh_node(sshd)) as runner:
        result = runner.check("shopt -q login_shell && echo login || echo not-login")
    assert result.tail == "login"


def test_run_cwd_is_relative_to_home_unless_absolute(
    sshd: Sshd, ssh_node: NodeFor, home_scratch: Path, tmp_path: Path
):
    workdir = home_scratch / "my work"
    workdir.mkdir(parents=True)
    relative = f"{home_scratch.name}/my work"
    with SSHRunner(ssh_node(sshd)) as runner:
        assert runner.check("pwd", cwd=f"~/{relative}").tail == str(workdir)
        assert runner.check("pwd", cwd=relative).tail == str(workdir)
        assert runner.check("pwd", cwd=str(tmp_path)).tail == str(tmp_path)
        assert runner.check("pwd", cwd="~").tail == str(home_scratch.parent)
        assert runner.check("pwd").tail == str(home_scratch.parent)
        assert not runner.run("pwd", cwd=f"{relative}/missing").ok


def test_timeout_kills_the_command_and_its_children(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path
):
    pidfile = tmp_path / "pid"
    with SSHRunner(ssh_node(sshd)) as runner:
        result = runner.run(
            f"sleep 300 & echo $! > {pidfile}; echo started; wait", timeout=1
        )
        assert not result.ok
        assert result.tail.splitlines() == ["started", "(timed out after 1 s)"]
        child = int(pidfile.read_text())
        wait_until(lambda: not alive(child), "the timed-out command's child to die")
        assert runner.check("echo still usable").tail == "still usable"


def test_a_lost_connection_kills_the_command_and_raises(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path
):
    pidfile = tmp_path / "pid"
    outcome: list[BaseException | object] = []
    runner = SSHRunner(ssh_node(sshd))

    def run() -> None:
        try:
            outcome.append(runner.run(f"sleep 300 & echo $! > {pidfile}; wait"))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", "the command")
    runner.transport.close()
    thread.join()
    assert isinstance(outcome[0], NodeUnreachableError), outcome
    child = int(pidfile.read_text())
    wait_until(lambda: not alive(child), "the orphaned command to die")
    runner.close()


def test_a_node_without_ssh_user_is_rejected():
    with pytest.raises(ValueError, match="no ssh_user"):
        SSHRunner(NodeInfo(instance_id="i-1", internal_ip="127.0.0.1"))


# --- upload -------------------------------------------------------------------------------


def test_upload_copies_a_tree_with_modes_mtimes_and_symlinks(
    sshd: Sshd, ssh_node: NodeFor, home_scratch: Path, tmp_path: Path
):
    source = make_tree(tmp_path / "src")
    with SSHRunner(ssh_node(sshd)) as runner:
        runner.upload(str(source), f"~/{home_scratch.name}/deeper/work")
    assert snapshot(home_scratch / "deeper" / "work") == snapshot(source)


def test_upload_a_file_to_a_path_or_into_a_directory(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path
):
    source = tmp_path / "config.yaml"
    source.write_text("a: 1\n")
    source.chmod(0o604)
    remote = tmp_path / "remote"
    with SSHRunner(ssh_node(sshd)) as runner:
        runner.upload(str(source), str(remote / "a" / "b" / "renamed.yaml"))
        runner.upload(str(source), str(remote / "a"))
    for copy in (remote / "a" / "b" / "renamed.yaml", remote / "a" / "config.yaml"):
        assert copy.read_text() == "a: 1\n"
        assert stat.S_IMODE(copy.stat().st_mode) == 0o604
        assert int(copy.stat().st_mtime) == int(source.stat().st_mtime)


def test_reupload_skips_unchanged_files_and_never_deletes(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG, logger="orch.runtime.ssh")
    source = make_tree(tmp_path / "src")
    remote = tmp_path / "remote"
    with SSHRunner(ssh_node(sshd)) as runner:
        runner.upload(str(source), str(remote))
        before = change_times(remote)
        time.sleep(0.05)  # so that any rewrite would show as a new ctime
        caplog.clear()
        runner.upload(str(source), str(remote))
        assert change_times(remote) == before
        assert "0 copied, 4 unchanged" in caplog.text  # 3 files and the symlink

        (source / "secret").write_text("a longer secret")
        (source / "added.txt").write_text("new")
        (source / "run.sh").unlink()
        runner.upload(str(source), str(remote))
    after = change_times(remote)
    assert (remote / "secret").read_text() == "a longer secret"
    assert (remote / "added.txt").read_text() == "new"
    assert (remote / "run.sh").exists()  # deletions are not mirrored
    assert after["secret"] != before["secret"]
    assert after["data/nested/deep.txt"] == before["data/nested/deep.txt"]


def test_upload_replaces_a_remote_symlink_instead_of_writing_through_it(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path
):
    source = make_tree(tmp_path / "src")
    outside = tmp_path / "outside.txt"
    outside.write_text("must stay")
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "secret").symlink_to(outside)
    with SSHRunner(ssh_node(sshd)) as runner:
        runner.upload(str(source), str(remote))
    assert outside.read_text() == "must stay"
    assert not (remote / "secret").is_symlink()
    assert (remote / "secret").read_text() == "s3cret"


# --- connections ----------------------------------------------------------------------------


def test_runners_to_one_node_share_one_transport(sshd: Sshd, ssh_node: NodeFor):
    node = ssh_node(sshd)
    same_address = node.model_copy(update={"instance_id": "another-id"})
    # closing(): CommandRunner.__enter__ is typed to return the base class
    with closing(SSHRunner(node)) as first, closing(SSHRunner(same_address)) as second:
        assert first.transport is second.transport
        transport = first.transport
        # The last line: this machine's root login shell (pyenv init in .bashrc) may
        # warn on stderr, which the tail includes, when commands start at the same time.
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(
                lambda i: (first if i % 2 else second).run(f"echo {i}").tail.splitlines()[-1],
                range(8),
            ))
        assert results == [str(i) for i in range(8)]
    with closing(SSHRunner(node)) as later:  # kept in the pool after its runners closed
        assert later.transport is transport
    POOL.close_all()
    assert not transport.is_active()


def test_a_dead_pooled_connection_is_replaced(sshd: Sshd, ssh_node: NodeFor):
    node = ssh_node(sshd)
    with closing(SSHRunner(node)) as runner, closing(SSHRunner(node)) as other:
        dead = runner.transport
        dead.close()
        assert runner.check("echo again").tail == "again"
        assert runner.transport is not dead and runner.transport.is_active()
        assert other.transport is runner.transport


def test_connecting_retries_until_sshd_listens(
    sshd_factory: Callable[..., Sshd], ssh_node: NodeFor, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG, logger="orch.runtime.ssh_connect")
    server = sshd_factory()
    starter = threading.Timer(1.0, server.start)
    starter.start()
    try:
        wait_for_ssh(ssh_node(server), deadline=60)
    finally:
        starter.join()
    assert "not ready" in caplog.text  # it was refused at least once, then got in


def test_an_unreachable_port_raises_after_the_deadline(ssh_node: NodeFor):
    with pytest.raises(NodeUnreachableError, match=r"after \d+ attempts in 1.5 s"):
        wait_for_ssh(ssh_node(free_port()), deadline=1.5)


def test_a_rejected_client_key_raises_after_the_deadline(
    sshd: Sshd, ssh_node: NodeFor, tmp_path: Path
):
    stranger = keygen(tmp_path / "stranger")
    node = ssh_node(sshd).model_copy(update={"ssh_key_path": str(stranger)})
    started = time.monotonic()
    with pytest.raises(NodeUnreachableError, match="AuthenticationException"):
        # Long enough for one attempt to reach the key's refusal on a loaded machine (1 s
        # was not, in CI); later attempts the deadline cuts short do not hide it.
        wait_for_ssh(node, deadline=5.0)
    assert time.monotonic() - started < 30  # it gave up, rather than retry for ever


def test_host_key_is_trusted_on_first_use_and_a_changed_key_is_refused(
    sshd_factory: Callable[..., Sshd], ssh_node: NodeFor
):
    first = sshd_factory()
    first.start()
    node = ssh_node(first)
    wait_for_ssh(node, deadline=30)
    recorded = f"[127.0.0.1]:{first.port} {first.public_host_key}\n"
    assert known_hosts_path().read_text() == recorded
    POOL.close_all()
    wait_for_ssh(node, deadline=30)  # the same key again: accepted

    POOL.close_all()
    first.stop()
    impostor = sshd_factory(port=first.port)
    impostor.start()
    with pytest.raises(HostKeyChangedError, match=rf"\[127.0.0.1\]:{first.port} changed"):
        wait_for_ssh(node, deadline=30)
    assert known_hosts_path().read_text() == recorded

    forget_host_key(node)
    wait_for_ssh(node, deadline=30)
    replaced = f"[127.0.0.1]:{first.port} {impostor.public_host_key}\n"
    assert known_hosts_path().read_text() == replaced


def test_first_use_rechecks_keys_recorded_meanwhile_by_another_process(
    ssh_client_key: Path, tmp_path: Path
):
    """The policy runs when the file this process read had no key for the host; another
    worker may have recorded one since, and that one must win."""
    theirs = paramiko.PKey.from_path(ssh_client_key)
    ours = paramiko.PKey.from_path(keygen(tmp_path / "other"))
    line = f"[10.0.0.7]:2222 {theirs.get_name()} {theirs.get_base64()}\n"
    known_hosts_path().parent.mkdir(parents=True)
    known_hosts_path().write_text(line)
    policy = TrustOnFirstUse()
    with pytest.raises(HostKeyChangedError, match="changed"):
        policy.missing_host_key(paramiko.SSHClient(), "[10.0.0.7]:2222", ours)
    policy.missing_host_key(paramiko.SSHClient(), "[10.0.0.7]:2222", theirs)
    policy.missing_host_key(paramiko.SSHClient(), "10.0.0.8", ours)
    assert known_hosts_path().read_text() == (
        f"{line}10.0.0.8 {ours.get_name()} {ours.get_base64()}\n"
    )
