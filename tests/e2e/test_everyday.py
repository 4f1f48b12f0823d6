"""Everyday comfort, end to end: `orch --version`, shell completion, `orch status` with its
managed-jobs line, several clusters (or -a) at once for stop/start/autostop/down with one
confirmation, and `orch cost-report` from the records (stopped time not billed, torn-down
clusters still reported). Its own control plane, so that -a and the totals see only the
two clusters (and one managed job) this module makes."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orch.config import venv_binary
from orch.server import ControlPlane, _free_port
from tests.e2e.conftest import REPO, Orch, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Orch]:
    cli = Orch(tmp_path_factory.mktemp("everyday-home"))
    cli("server", "start")
    try:
        yield cli
    finally:
        cli("down", "-a", "-y", check=False)
        cli("server", "stop", check=False)


def embedded_version() -> str:
    out = subprocess.run([str(venv_binary("temporal")), "--version"], capture_output=True,
                         text=True, check=True).stdout
    found = re.search(r"Server (\S+?)[,)]", out)
    assert found, out
    return found.group(1)


def test_version_reports_everything_without_starting_the_control_plane(tmp_path: Path
                                                                         ) -> None:
    fresh = Orch(tmp_path / "fresh")
    lines = fresh("--version").stdout.splitlines()
    catalog = json.loads((REPO / "orch/catalog/data/catalog.json").read_text())["date"]
    assert lines == [
        f"orch {importlib.metadata.version('orch')}",
        f"Temporal server {embedded_version()} (embedded)",
        f"Ray {importlib.metadata.version('ray')}",
        f"Catalog {catalog}",
    ]
    assert ControlPlane(fresh.home).state() is None  # nothing was started


def test_version_asks_an_external_server_and_survives_one_that_is_down(own: Orch) -> None:
    state = own.plane().state()
    assert state is not None
    own.env["TEMPORAL_ADDRESS"] = state.address
    try:
        asked = own("--version").stdout
        assert f"Temporal server {embedded_version()} ({state.address})" in asked
        own.env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{_free_port()}"
        started = time.monotonic()
        down = own("--version")
        assert "Temporal server unreachable (127.0.0.1:" in down.stdout
        assert time.monotonic() - started < 10
    finally:
        own.env.pop("TEMPORAL_ADDRESS")


def test_shell_completion_scripts_and_answers(tmp_path: Path) -> None:
    cli = Orch(tmp_path / "home")
    assert "_ORCH_COMPLETE=complete_bash" in cli("--show-completion", "bash").stdout
    assert "_ORCH_COMPLETE=complete_zsh" in cli("--show-completion", "zsh").stdout
    wrong = cli("--show-completion", "ksh", check=False)
    assert wrong.returncode == 2 and "ksh" in wrong.stderr
    cli.env.update(_ORCH_COMPLETE="complete_bash", COMP_WORDS="orch cost", COMP_CWORD="1")
    assert cli().stdout.split() == ["cost-report"]
    del cli.env["_ORCH_COMPLETE"]
    cli.env["HOME"] = str(tmp_path)
    installed = cli("--install-completion", "bash").stdout
    assert "bash completion installed" in installed
    script = installed.split(" installed in ")[1].split()[0]
    assert script in (tmp_path / ".bashrc").read_text()
    assert "_ORCH_COMPLETE=complete_bash" in Path(script).read_text()


def cost_lines(orch: Orch) -> dict[str, dict[str, Any]]:
    report = json.loads(orch("cost-report", "--json").stdout)
    return {line["name"]: line for line in report["lines"]}


def statuses(orch: Orch) -> dict[str, str]:
    """The clusters' statuses (not the managed job's cluster, listed while it runs)."""
    return {c["name"]: c["status"] for c in orch.json("status") if not c["job_id"]}


def test_many_clusters_at_once_and_what_they_cost(own: Orch) -> None:
    launches = [own.popen("launch", "-y", "-c", name, "echo up") for name in ("ea", "eb")]
    own("jobs", "launch", "-y", "-d", "-n", "brief", "echo done")
    assert [p.wait(timeout=180) for p in launches] == [0, 0]

    refused = own("stop", "ea", "nosuch", check=False)  # nothing done: one name is wrong
    assert refused.returncode == 2 and "cluster nosuch does not exist" in refused.stderr
    assert own("stop", "-a", "ea", check=False).returncode == 2
    asked = own("stop", "-a", check=False)  # no -y, no answer: nothing is stopped
    assert "Stop 2 cluster(s): ea, eb?" in asked.stdout and asked.returncode == 1
    assert statuses(own) == {"ea": "UP", "eb": "UP"}

    own("stop", "-a", "-y")
    assert statuses(own) == {"ea": "STOPPED", "eb": "STOPPED"}
    assert "No cluster to act on" in own("stop", "-a", "-y").stdout  # -a: the UP ones
    before = cost_lines(own)["ea"]
    time.sleep(2)
    assert cost_lines(own)["ea"]["hours"] == before["hours"] > 0  # stopped: not billed

    own("start", "-y", "ea", "eb")
    own("autostop", "-y", "ea", "eb", "-i", "45")
    listed = [c for c in own.json("status") if not c["job_id"]]
    assert [(c["status"], "45 min" in c["autostop"]) for c in listed] == [("UP", True)] * 2
    assert cost_lines(own)["ea"]["hours"] > before["hours"]

    wait_for(lambda: "1 SUCCEEDED" in own("status").stdout, 120, "the managed job to end")
    everything = own("status").stdout
    assert "ea" in everything and "Managed jobs: 1 SUCCEEDED" in everything
    only = own("status", "eb").stdout
    assert "eb" in only and "ea" not in only and "Managed jobs" not in only

    own("down", "-a", "-y")
    assert statuses(own) == {}
    lines = cost_lines(own)
    assert {n: (line["status"], line["cost"]) for n, line in lines.items()} == {
        "ea": ("TERMINATED", 0.0), "eb": ("TERMINATED", 0.0),  # the local cloud is free
        "job 1 (brief)": ("SUCCEEDED", 0.0)}
    assert all(line["hours"] > 0 for line in lines.values())
    assert "Total: $ 0.00" in own("cost-report").stdout
