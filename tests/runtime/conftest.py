"""Fixtures for the SSH runner's tests: real sshd processes on loopback (tests/fakes/sshd.py)."""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orch.clouds.base import NodeInfo
from orch.runtime.ssh_connect import POOL
from tests.fakes.sshd import Sshd, keygen, unavailable_reason


@pytest.fixture(scope="session")
def ssh_client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if reason := unavailable_reason():
        pytest.skip(reason)
    return keygen(tmp_path_factory.mktemp("ssh-client") / "id_ed25519")


@pytest.fixture(scope="session")
def sshd(ssh_client_key: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """One sshd shared by the tests that do not stop or replace it."""
    server = Sshd(tmp_path_factory.mktemp("sshd"), ssh_client_key.with_suffix(".pub"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sshd_factory(ssh_client_key: Path, tmp_path: Path) -> Iterator[Callable[..., Sshd]]:
    """Makes sshds (not started) that this test may start, stop and replace."""
    servers: list[Sshd] = []

    def make(port: int | None = None) -> Sshd:
        server = Sshd(tmp_path / f"sshd-{len(servers)}", ssh_client_key.with_suffix(".pub"), port)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def ssh_isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ORCH_HOME (so known_hosts starts empty) and an empty connection pool."""
    home = tmp_path / "orch-home"
    monkeypatch.setenv("ORCH_HOME", str(home))
    POOL.close_all()
    yield home
    POOL.close_all()


@pytest.fixture
def ssh_node(ssh_client_key: Path) -> Callable[[Sshd | int], NodeInfo]:
    """The NodeInfo that reaches an sshd (or a bare port) as the current user."""

    def make(server: Sshd | int) -> NodeInfo:
        port = server if isinstance(server, int) else server.port
        return NodeInfo(
            instance_id=f"node-{port}",
            internal_ip="127.0.0.1",
            ssh_port=port,
            ssh_user=getpass.getuser(),
            ssh_key_path=str(ssh_client_key),
        )

    return make


@pytest.fixture
def home_scratch() -> Iterator[Path]:
    """A directory path (not created) under the SSH user's home — sshd logs in as the user
    running the tests — for tests of home-relative paths; removed afterwards."""
    path = Path(pwd.getpwuid(os.getuid()).pw_dir) / f".orch-ssh-test-{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def wheel_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ORCH_HOME for the session, so the wheel of orch is built once."""
    return tmp_path_factory.mktemp("orch-home")
