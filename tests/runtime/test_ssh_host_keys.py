"""The recorded host keys are parsed once per change of known_hosts, and a change by
another process (a key recorded, a host forgotten) is always seen."""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
import pytest

from orch.runtime import ssh_host_keys
from orch.runtime.ssh_host_keys import HostKeyChangedError, check_host_key, known_hosts_path
from tests.fakes.sshd import keygen

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
