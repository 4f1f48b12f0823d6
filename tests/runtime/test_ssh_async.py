"""The watch's SSH client (orch.runtime.ssh_async) against real sshds on loopback, and the
head's long poll (orch.runtime.jobs.wait_then_poll_command) run through it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orch.clouds.base import NodeInfo
from orch.runtime import jobs, ssh_async
from orch.runtime.commands import NodeUnreachableError
from orch.runtime.job_records import JobPoll, JobRecord
from orch.runtime.ssh_async import AsyncConnectionPool
from orch.runtime.ssh_host_keys import HostKeyChangedError, known_hosts_path
from orch.status import JobStatus
from tests.fakes.sshd import Sshd

pytestmark = pytest.mark.usefixtures("ssh_isolated")

NodeFor = Callable[[Sshd | int], NodeInfo]


def printed_last(tail: str) -> str:
    """The command's own line. Sessions started at once can race in the machine user's
    shell start-up (this machine's root ~/.bashrc runs `pyenv rehash`, which prints "cannot
    rehash" when another session holds its lock); the runtime sshds keep that start-up,
    since the runtime's commands need the PATH it sets."""
    return tail.splitlines()[-1]


async def test_commands_share_one_connection_and_their_stdin_stays_open(
    sshd: Sshd, ssh_node: NodeFor,
) -> None:
    pool = AsyncConnectionPool()
    node = ssh_node(sshd)
    # `read -t 2` ends at once on EOF: it waits its 2 s only with stdin open.
    started = time.monotonic()
    results = await asyncio.gather(*(
        pool.run(node, f"read -r -t 2 _; echo done {i} $?", timeout=30, connect_deadline=10)
        for i in range(5)))
    assert time.monotonic() - started >= 2
    assert sorted(printed_last(r.tail) for r in results) == [f"done {i} 142" for i in range(5)]
    assert pool.open_connections == 1
    pool.close_all()


async def test_a_dead_connection_is_replaced_and_a_changed_host_key_refused(
    sshd_factory: Callable[..., Sshd], ssh_node: NodeFor,
) -> None:
    first = sshd_factory()
    first.start()
    node = ssh_node(first)
    pool = AsyncConnectionPool()
    assert (await pool.run(node, "echo one", timeout=30, connect_deadline=10)).tail == "one"
    recorded = known_hosts_path().read_text()
    assert f"[127.0.0.1]:{first.port}" in recorded

    for held in pool._held.values():  # the node rebooted: the connection is gone
        held.connection.abort()
    await asyncio.sleep(0.1)
    assert (await pool.run(node, "echo two", timeout=30, connect_deadline=10)).tail == "two"

    first.stop()
    pool.close_all()
    replaced = sshd_factory(first.port)  # same address, another host key
    replaced.start()
    with pytest.raises(HostKeyChangedError):
        await pool.run(node, "echo three", timeout=30, connect_deadline=10)
    assert known_hosts_path().read_text() == recorded


async def test_at_the_bound_the_least_recently_used_idle_connection_is_closed(
    sshd_factory: Callable[..., Sshd], ssh_node: NodeFor,
) -> None:
    servers = [sshd_factory() for _ in range(3)]
    for server in servers:
        server.start()
    pool = AsyncConnectionPool(max_connections=2)
    for server in servers:
        await pool.run(ssh_node(server), "true", timeout=30, connect_deadline=10)
    assert pool.open_connections == 2
    assert set(pool._held) == {f"{ssh_node(s).ssh_user}@127.0.0.1:{s.port}"
                               for s in servers[1:]}
    pool.close_all()


async def test_handshakes_take_turns_and_a_wait_for_a_turn_is_not_held_against_the_node(
    sshd_factory: Callable[..., Sshd], ssh_node: NodeFor, monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = [sshd_factory() for _ in range(6)]
    for server in servers:
        server.start()
    under_way, most = 0, 0
    real_handshake = ssh_async._handshake

    async def slow_handshake(node: NodeInfo, timeout: float) -> object:
        nonlocal under_way, most
        under_way += 1
        most = max(most, under_way)
        try:
            await asyncio.sleep(1.5)  # a handshake on a loaded worker
            return await real_handshake(node, timeout)
        finally:
            under_way -= 1

    monkeypatch.setattr(ssh_async, "_handshake", slow_handshake)
    pool = AsyncConnectionPool(max_handshakes=2)
    # The last pair waits ~3 s for its turn, longer than its whole connect deadline.
    results = await asyncio.gather(*(
        pool.run(ssh_node(server), "echo up", timeout=30, connect_deadline=2.5)
        for server in servers))
    assert [printed_last(r.tail) for r in results] == ["up"] * 6
    assert most == 2 and pool.open_connections == 6
    pool.close_all()


async def test_an_unreachable_node_is_given_up_after_the_deadline(ssh_node: NodeFor) -> None:
    from tests.fakes.sshd import free_port

    started = time.monotonic()
    with pytest.raises(NodeUnreachableError, match="cannot reach"):
        await AsyncConnectionPool().run(ssh_node(free_port()), "true", timeout=5,
                                        connect_deadline=1.5)
    assert time.monotonic() - started < 10


def _job(home: Path, driver_pid: int | None = None) -> Path:
    root = home / jobs.JOBS_PATH
    with jobs.locked(1, root):
        jobs.write(JobRecord(id=1, status=JobStatus.RUNNING, submitted_at=jobs.now(),
                             driver_pid=driver_pid), root)
    return root


def _long_poll(home: Path, wait_s: int) -> subprocess.Popen[str]:
    command = jobs.wait_then_poll_command(sys.executable, 1, 0, wait_s)
    return subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={"HOME": str(home)})


def _answer(poll: subprocess.Popen[str]) -> JobPoll:
    """What the long poll printed, its stdin kept open (communicate() would close it)."""
    assert poll.stdout is not None
    return JobPoll.model_validate_json(poll.stdout.read())


def test_the_long_poll_answers_at_a_change_and_says_unchanged_otherwise(tmp_path: Path) -> None:
    root = _job(tmp_path)
    assert _answer(_long_poll(tmp_path, 30)).record is not None  # never polled yet: at once

    started = time.monotonic()
    quiet = _long_poll(tmp_path, 2)
    assert quiet.wait(timeout=30) == jobs.UNCHANGED_EXIT and quiet.stdout is not None
    assert quiet.stdout.read() == "" and time.monotonic() - started >= 2

    waiting = _long_poll(tmp_path, 30)
    time.sleep(1.5)
    ended = time.monotonic()
    jobs.update(1, root=root, status=JobStatus.SUCCEEDED, ended_at=jobs.now())
    poll = _answer(waiting)
    assert poll.record is not None and poll.record.status == JobStatus.SUCCEEDED
    assert time.monotonic() - ended < 20  # at the change, not at the end of its 30 s


def test_the_long_poll_sees_a_dead_driver(tmp_path: Path) -> None:
    driver = subprocess.Popen(["sleep", "1.5"])
    _job(tmp_path, driver.pid)
    _answer(_long_poll(tmp_path, 30))  # the first poll

    waiting = _long_poll(tmp_path, 30)
    driver.wait()
    poll = _answer(waiting)
    assert poll.record is not None and poll.record.status == JobStatus.FAILED_DRIVER


def test_the_long_poll_ends_when_its_watcher_goes_away(tmp_path: Path) -> None:
    _job(tmp_path)
    _answer(_long_poll(tmp_path, 30))  # the first poll
    waiting = _long_poll(tmp_path, 30)
    time.sleep(1.5)
    assert waiting.poll() is None and waiting.stdin is not None
    started = time.monotonic()
    waiting.stdin.close()
    assert waiting.wait(timeout=10) == jobs.WATCHER_GONE
    assert waiting.stdout is not None and waiting.stdout.read() == ""
    assert time.monotonic() - started < 3
