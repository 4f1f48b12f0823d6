"""`orch config show` and the config's effect on commands, through the installed `orch`
script; none of these needs (or starts) the control plane."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orch.client import Client
from orch.config import TemporalSettings
from orch.lifecycle import Autostop
from tests.e2e.conftest import Orch

AWS_TASK = "resources:\n  cloud: aws\nrun: echo hi\n"


@pytest.fixture
def cli(tmp_path: Path) -> Orch:
    cli = Orch(tmp_path / "home")
    for name in ("ORCH_CONFIG", "ORCH_LAUNCH_PERMITS", "ORCH_JOB_SLOTS", "TEMPORAL_NAMESPACE"):
        cli.env.pop(name, None)
    (tmp_path / "home").mkdir()
    return cli


def write_config(cli: Orch, text: str | bytes) -> Path:
    path = cli.home / "config.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def assert_no_control_plane(cli: Orch) -> None:
    assert cli.plane().state() is None and not (cli.home / "server").exists()


def test_show_prints_each_value_and_its_source(cli: Orch) -> None:
    path = write_config(cli, "launch_permits: 3\nallowed_clouds: [gcp, local]\n")
    cli.env["ORCH_JOB_SLOTS"] = "11"
    result = cli("config", "show")
    lines = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:]}
    assert lines["launch_permits"] == ["3", "file", str(path)]
    assert lines["job_slots"] == ["11", "env", "ORCH_JOB_SLOTS"]
    assert lines["allowed_clouds"] == ["gcp,", "local", "file", str(path)]
    assert lines["temporal.namespace"] == ["default", "default"]
    shown = json.loads(cli("config", "show", "--json").stdout)
    assert shown["path"] == str(path) and shown["file_exists"] is True
    assert shown["values"]["job_slots"] == {"value": 11, "source": "env ORCH_JOB_SLOTS"}
    assert_no_control_plane(cli)


def test_show_without_a_file_says_so(cli: Orch) -> None:
    result = cli("config", "show")
    assert "(not present" in result.stdout and "file " not in result.stdout
    assert_no_control_plane(cli)


@pytest.mark.parametrize(("text", "expected"), [
    ("job_slot: 3\n", "job_slot: unknown field; did you mean 'job_slots'?"),
    ("temporal: {tls: {cart: x}}\n", "temporal.tls.cart: unknown field; did you mean 'cert'"),
    (b"\x00\x9f\xff binary", "a binary file, not UTF-8 text (byte 0x9f at line 1 column 2)"),
    ("a: [\n", "not valid YAML"),
])
def test_a_broken_config_exits_2_with_its_path_and_field(cli: Orch, text: str | bytes,
                                                          expected: str) -> None:
    path = write_config(cli, text)
    # every command reads the config; one broken file is enough to show it for all
    commands = [("config", "show")] + ([("status",), ("server", "status"), ("jobs", "queue")]
                                       if isinstance(text, bytes) else [])
    for command in commands:
        result = cli(*command, check=False)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert f"{path}: invalid config" in result.stderr and expected in result.stderr
        assert "Traceback" not in result.stderr
    assert_no_control_plane(cli)


def test_a_directory_or_a_missing_orch_config_exits_2(cli: Orch, tmp_path: Path) -> None:
    (cli.home / "config.yaml").mkdir()
    result = cli("config", "show", check=False)
    assert result.returncode == 2 and "is a directory" in result.stderr
    cli.env["ORCH_CONFIG"] = str(tmp_path / "nope.yaml")
    result = cli("config", "show", check=False)
    assert result.returncode == 2 and "nope.yaml: invalid config" in result.stderr


def test_a_disallowed_cloud_is_refused_by_a_dryrun(cli: Orch, tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(AWS_TASK)
    write_config(cli, "allowed_clouds: [gcp, local]\n")
    result = cli("launch", "--dryrun", str(task), check=False)
    assert result.returncode == 2
    assert "cloud 'aws' is not in the config's allowed_clouds (gcp, local)" in " ".join(
        result.stderr.split())
    write_config(cli, "allowed_clouds: [aws]\naws: {default_region: ap-northeast-1}\n")
    shown = json.loads(cli("launch", "--dryrun", str(task), "--json").stdout)
    assert shown[0]["region"] == "ap-northeast-1" and len({c["region"] for c in shown}) > 1
    assert_no_control_plane(cli)



def test_check_reports_disallowed_clouds_without_probing_them(cli: Orch) -> None:
    write_config(cli, "allowed_clouds: [local, gcp]\n")
    rows = {line.split()[0]: line for line in cli("check").stdout.splitlines()[1:]}
    for cloud in ("aws", "azure"):
        assert "no" in rows[cloud] and "not in the config's allowed_clouds" in rows[cloud]
    assert "yes" in rows["local"] and "allowed_clouds" not in rows["gcp"]

def test_the_temporal_section_points_the_cli_at_a_server_and_env_wins(cli: Orch) -> None:
    write_config(cli, "temporal: {address: 'temporal.example:7233', namespace: prod}\n")
    result = cli("server", "status")
    assert "Using the Temporal server at temporal.example:7233 (namespace prod)" in result.stdout
    cli.env["TEMPORAL_ADDRESS"] = "other.example:7233"
    result = cli("server", "status")
    assert "other.example:7233 (namespace prod)" in result.stdout
    assert_no_control_plane(cli)


def autostop_of(orch: Orch, cluster: str) -> Autostop | None:
    """The cluster's autostop as its workflow holds it (a query: no visibility lag)."""

    async def ask() -> Autostop | None:
        state = orch.plane().state()
        assert state is not None
        client = await Client.connect(TemporalSettings(address=state.address))
        record = await client.record(cluster)
        assert record is not None
        return record.autostop

    return asyncio.run(ask())


def test_a_cluster_the_launch_creates_gets_the_default_autostop(orch: Orch) -> None:
    """Through the real launch path: the CLI's request reaches the cluster's workflow; a
    reused cluster keeps the setting it has."""
    path = orch.home / "config.yaml"
    path.write_text("autostop: {idle_minutes: 90, down: true}\n")
    try:
        orch("launch", "-y", "-d", "-c", "cfg-autostop", "echo hi")
        assert autostop_of(orch, "cfg-autostop") == Autostop(idle_minutes=90, down=True)
        orch("autostop", "cfg-autostop", "--cancel")
        orch("launch", "-y", "-d", "-c", "cfg-autostop", "echo again")
        assert autostop_of(orch, "cfg-autostop") is None
        orch("launch", "-y", "-d", "-c", "cfg-autostop", "-i", "7", "echo flags")
        assert autostop_of(orch, "cfg-autostop") == Autostop(idle_minutes=7)
    finally:
        path.unlink()
        orch("down", "-y", "cfg-autostop", check=False)
