"""The embedded control plane: side by side homes, stale state, an external server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orch.server import ControlPlane
from tests.e2e.conftest import Orch

pytestmark = pytest.mark.e2e


def test_two_homes_run_side_by_side_on_their_own_ports(orch: Orch, tmp_path: Path) -> None:
    other = Orch(tmp_path / "other-home")
    try:
        other("server", "start")
        mine, theirs = orch.plane().state(), other.plane().state()
        assert mine and theirs
        assert {mine.port, mine.ui_port}.isdisjoint({theirs.port, theirs.ui_port})
        assert "(up)" in other("server", "status").stdout
        assert other.json("status") == []  # its own server knows none of our clusters
    finally:
        other("server", "stop")
    assert other.plane().state() is None
    assert "(up)" in orch("server", "status").stdout  # ours is untouched


def test_a_stale_state_file_is_replaced(tmp_path: Path) -> None:
    home = tmp_path / "stale-home"
    (home / "server").mkdir(parents=True)
    (home / "server" / "state.json").write_text(json.dumps({
        "port": 1, "ui_port": 2, "server_pid": 999_999_999, "worker_pid": 999_999_998,
        "started_at": "2026-01-01T00:00:00Z"}))
    cli = Orch(home)
    try:
        cli("server", "start")
        state = ControlPlane(home).state()
        assert state is not None and state.server_pid != 999_999_999
        assert cli.json("status") == []
    finally:
        cli("server", "stop")


def test_an_external_server_is_used_and_none_started(orch: Orch, tmp_path: Path) -> None:
    state = orch.plane().state()
    assert state is not None
    cli = Orch(tmp_path / "client-only")
    cli.env["TEMPORAL_ADDRESS"] = state.address
    assert "Using the Temporal server at" in cli("server", "status").stdout
    assert isinstance(cli.json("status"), list)
    assert not (cli.home / "server").exists()
