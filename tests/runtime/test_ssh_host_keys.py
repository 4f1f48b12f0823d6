"""The recorded host keys are parsed once per change of known_hosts, by both SSH clients,
and a change by another process (a key recorded, a host forgotten) is always seen."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest

from orch.clouds.base import NodeInfo
from orch.runtime import ssh_host_keys
from orch.runtime.ssh import SSHRunner
from orch.runtime.ssh_connect import POOL
from orch.runtime.ssh_host_keys import (
    HostKeyChangedError,
    check_host_key,
    forget_host_key,
    known_hosts_path,
)
from tests.fakes.sshd import Sshd, keygen

pytestmark = pytest.mark.usefixtures("ssh_isolated")


def _line(hostname: str, key: paramiko.PKey) -> str:
    return f"{hostname} {key.get_name()} {key.get_base64()}\n"


def test_known_hosts_is_parsed_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = paramiko.PKey.from_path(keygen(tmp_path / "ours"))
    theirs = paramiko.PKey.from_path(keygen(tmp_path / "theirs"))
    parses: list[Path | None] = []
    load = ssh_host_keys.load_known_hosts

    def counted(path: Path | None = None) -> paramiko.HostKeys:
        parses.append(path)
        return load(path)

    monkeypatch.setattr(ssh_host_keys, "load_known_hosts", counted)
    for i in range(50):  # first use of 50 hosts: each recorded without reading the file
        check_host_key(f"[127.0.0.{i}]:22", ours)
    for i in range(50):
        check_host_key(f"[127.0.0.{i}]:22", ours)
    assert parses == []
    assert known_hosts_path().read_text() == "".join(
        _line(f"[127.0.0.{i}]:22", ours) for i in range(50))

    # Another process records a host: appended, so seen.
    with open(known_hosts_path(), "a") as known_hosts:
        known_hosts.write(_line("10.0.0.9", theirs))
    with pytest.raises(HostKeyChangedError, match="10.0.0.9 changed"):
        check_host_key("10.0.0.9", ours)
    assert len(parses) == 1

    # Another process forgets a host and a new machine took its address: replaced, so seen.
    partial = known_hosts_path().with_name("known_hosts.new")
    partial.write_text(_line("[127.0.0.0]:22", theirs))
    os.replace(partial, known_hosts_path())
    with pytest.raises(HostKeyChangedError, match=r"\[127.0.0.0\]:22 changed"):
        check_host_key("[127.0.0.0]:22", ours)
    check_host_key("[127.0.0.0]:22", theirs)
    check_host_key("[127.0.0.1]:22", ours)  # no longer recorded: recorded again
    assert len(parses) == 2


def test_paramiko_connections_check_keys_without_parsing_known_hosts(
    sshd: Sshd, ssh_node: Callable[[Sshd | int], NodeInfo], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The paramiko runner's connections check the host key against the parsed copy, like
    the watch's: parsing a known_hosts of 1,700 heads on every connection (paramiko takes
    the logging module's lock for each line) stalled 2,000 managed jobs' launches. A
    changed key is still refused, and a forgotten host is recorded again."""
    other = paramiko.PKey.from_path(keygen(tmp_path / "other"))
    for i in range(2000):  # the other heads of a large fleet
        check_host_key(f"[10.1.{i // 250}.{i % 250}]:22", other)
    parses = 0
    load = paramiko.HostKeys.load

    def counted(self: paramiko.HostKeys, filename: str) -> None:
        nonlocal parses
        parses += 1
        load(self, filename)

    monkeypatch.setattr(paramiko.HostKeys, "load", counted)
    node = ssh_node(sshd)
    for _ in range(5):
        with SSHRunner(node) as runner:
            assert runner.check("true").ok
        POOL.close_all()  # the next runner makes a new connection
    assert parses == 0
    assert ssh_host_keys.host_key_name(node) in known_hosts_path().read_text()

    forget_host_key(node)
    assert parses == 0 and ssh_host_keys.host_key_name(node) not in known_hosts_path().read_text()
    with SSHRunner(node) as runner:  # recorded again
        runner.check("true")
    POOL.close_all()

    lines = known_hosts_path().read_text().splitlines()
    name = ssh_host_keys.host_key_name(node)
    known_hosts_path().write_text("".join(
        f"{line}\n" if not line.startswith(f"{name} ") else _line(name, other)
        for line in lines))
    with pytest.raises(HostKeyChangedError, match="changed"), SSHRunner(node) as runner:
        runner.check("true")
