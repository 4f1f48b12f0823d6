"""The embedded control plane: side by side homes, stale state, an external server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from orch.config import venv_binary
from orch.records import SA_CLUSTER, SEARCH_ATTRIBUTES
from orch.runtime.procfs import alive
from orch.server import ControlPlane, _free_port, _port_open, _terminate
from tests.e2e.conftest import Orch, wait_for

pytestmark = pytest.mark.e2e
KEYS: dict[str, Callable[[str], Any]] = {"Keyword": SearchAttributeKey.for_keyword,
                                         "Text": SearchAttributeKey.for_text,
                                         "Int": SearchAttributeKey.for_int,
                                         "KeywordList": SearchAttributeKey.for_keyword_list,
                                         "Bool": SearchAttributeKey.for_bool}


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


def test_the_servers_database_writes_ahead_of_its_log(orch: Orch) -> None:
    """WAL mode (``orch.server.sqlite_pragmas``): the mode is kept in the file itself."""
    orch("server", "start")
    database = orch.plane().dir / "temporal.db"
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_the_server_syncs_every_commit_unless_configured_not_to(orch: Orch,
                                                                tmp_path: Path) -> None:
    """``server_sync`` (default full) reaches the dev server's SQLite; the pragma lives in
    the connection, not the file, so it is read from the server's command line."""
    def synchronous(cli: Orch) -> list[str]:
        state = cli.plane().state()
        assert state is not None
        args = Path(f"/proc/{state.server_pid}/cmdline").read_bytes().decode().split("\0")
        return [a for a in args if a.startswith("synchronous=")]

    orch("server", "start")
    assert synchronous(orch) == ["synchronous=full"]
    relaxed = Orch(tmp_path / "relaxed-home")
    relaxed.env["ORCH_SERVER_SYNC"] = "normal"
    try:
        relaxed("server", "start")
        assert synchronous(relaxed) == ["synchronous=normal"]
    finally:
        relaxed("server", "stop")


def test_server_status_says_a_dead_worker_is_dead_and_how_to_restart_it(tmp_path: Path
                                                                         ) -> None:
    cli = Orch(tmp_path / "dead-worker-home")
    try:
        cli("server", "start")
        state = cli.plane().state()
        assert state is not None and state.worker_pid
        assert f"{state.worker_pid} (running)" in cli("server", "status").stdout
        os.kill(state.worker_pid, signal.SIGTERM)  # the worker this test's home started
        wait_for(lambda: not alive(state.worker_pid), what="the worker to exit")

        shown = cli("server", "status").stdout
        assert f"{state.worker_pid} (dead)" in shown and "orch server start restarts it" in shown
        cli("server", "start")
        restarted = cli.plane().state()
        assert restarted is not None and restarted.worker_pid != state.worker_pid
        assert f"{restarted.worker_pid} (running)" in cli("server", "status").stdout
    finally:
        cli("server", "stop")


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


def test_a_database_from_an_older_orch_gains_the_search_attributes_added_since(
    tmp_path: Path,
) -> None:
    home = tmp_path / "old-home"
    (home / "server").mkdir(parents=True)
    port, ui_port = _free_port(), _free_port()
    older = subprocess.Popen(  # an orch that knew one search attribute made this database
        [str(venv_binary("temporal")), "server", "start-dev", "--headless",
         "--db-filename", str(home / "server" / "temporal.db"), "--ip", "127.0.0.1",
         "--port", str(port), "--ui-port", str(ui_port), "--log-level", "error",
         "--search-attribute", f"{SA_CLUSTER}=Keyword"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _port_open(port), 60, "the older server")
    finally:
        _terminate(older.pid)
    cli = Orch(home)
    try:
        cli("server", "start")
        state = ControlPlane(home).state()
        assert state is not None

        asyncio.run(start_with_every_attribute(state.address))  # refused if one is unknown
    finally:
        cli("server", "stop")


async def start_with_every_attribute(address: str) -> None:
    client = await Client.connect(address)
    values: dict[str, object] = {"Keyword": "x", "Text": "x y", "Int": 1,
                                  "KeywordList": ["x", "y"], "Bool": True}
    pairs = [SearchAttributePair(KEYS[kind](name), values[kind])
             for name, kind in SEARCH_ATTRIBUTES.items()]
    handle = await client.start_workflow("NoSuchWorkflow", id="every-attribute",
                                         task_queue="nobody-polls",
                                         search_attributes=TypedSearchAttributes(pairs))
    await handle.terminate()
