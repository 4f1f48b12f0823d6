"""``secrets:`` and ``--secret NAME[=VALUE]``, by SkyPilot's rules: a mapping like envs, a
null value is required, the command line gives values (a bare name: from the caller's
environment), and every display shows ``<redacted>``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.tasks import overrides_from_flags, task_from_args
from orch.secret import REDACTED
from orch.spec import SpecError, parse_task

ORCH = str(Path(sys.executable).parent / "orch")
VALUE = "s3cr3t-spec-test-value"
FLAGS = dict(cloud=None, region=None, zone=None, instance_type=None, cpus=None, memory=None,
             gpus=None, num_nodes=None, use_spot=None, env=None)


def orch(home: Path, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "ORCH_HOME": str(home), "COLUMNS": "200", **(env or {})}
    for key in ("TEMPORAL_ADDRESS", "ORCH_CONFIG"):
        environment.pop(key, None)
    result = subprocess.run([ORCH, *args], env=environment, cwd=home, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stdout + result.stderr
    return result


def test_secrets_parse_like_envs_and_stay_apart_from_them() -> None:
    task = parse_task({"run": "echo", "envs": {"A": "1"}, "secrets": {"TOKEN": VALUE, "N": 7}},
                      "t.yaml")
    assert task.envs == {"A": "1"}
    assert {k: v.get_secret_value() for k, v in task.secrets.items()} == {"TOKEN": VALUE,
                                                                          "N": "7"}
    assert VALUE not in repr(task) and VALUE not in task.model_dump_json()


@pytest.mark.parametrize("secrets, field, says", [
    ({"TOKEN": None}, "secrets.TOKEN", "--secret TOKEN=VALUE"),
    ({"TOKEN": ""}, "secrets.TOKEN", "required"),
    ({"bad name": "x"}, "secrets", "not a valid environment variable name"),
    ({"TOKEN": {"nested": VALUE}}, "secrets", "expected a string or a number"),
    (["TOKEN"], "secrets", "expected a mapping"),
])
def test_a_required_or_malformed_secret_is_refused_without_its_value(
        secrets: object, field: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_task({"run": "echo", "secrets": secrets}, "t.yaml")
    [(where, message)] = caught.value.problems
    assert where == field and says in message and VALUE not in message


def test_secret_flags_fill_required_ones_and_win(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("secrets: {TOKEN: null, KEPT: from-yaml, OVER: old}\nrun: echo\n")
    monkeypatch.setenv("TOKEN", VALUE)
    overrides = overrides_from_flags(**FLAGS, secret=["TOKEN", "OVER=new"])
    task = task_from_args(str(path), overrides)
    assert {k: v.get_secret_value() for k, v in task.secrets.items()} == {
        "TOKEN": VALUE, "KEPT": "from-yaml", "OVER": "new"}


def test_a_bad_secret_flag_is_blamed_on_the_flag_without_its_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_TEST_UNSET", raising=False)
    with pytest.raises(SpecError) as caught:
        overrides_from_flags(**FLAGS, secret=["ORCH_TEST_UNSET"])
    assert caught.value.source == "--secret" and "ORCH_TEST_UNSET" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        overrides_from_flags(**FLAGS, secret=[f"bad name={VALUE}"])
    assert caught.value.source == "--secret" and VALUE not in str(caught.value)


def test_the_cli_refuses_a_missing_secret_with_exit_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("secrets: {HF_TOKEN: null}\nrun: echo\n")
    result = orch(tmp_path, "launch", "--dryrun", "t.yaml")
    assert result.returncode == 2
    assert "secrets.HF_TOKEN: required" in " ".join(result.stderr.split())
    missing = orch(tmp_path, "launch", "--dryrun", "t.yaml", "--secret", "ORCH_TEST_UNSET")
    assert missing.returncode == 2 and "--secret" in missing.stderr
    assert "ORCH_TEST_UNSET" in missing.stderr


def test_a_dry_run_shows_secrets_redacted(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(
        f"resources: {{infra: local}}\nsecrets: {{API_TOKEN: {VALUE}, OTHER: null}}\n"
        "run: echo\n")
    env = {"OTHER": VALUE + "-other"}
    result = orch(tmp_path, "launch", "--dryrun", "--json", "t.yaml", "--secret", "OTHER",
                  env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan and all(c["secrets"] == {"API_TOKEN": REDACTED, "OTHER": REDACTED}
                        for c in plan)
    table = orch(tmp_path, "launch", "--dryrun", "t.yaml", "--secret", "OTHER", env=env)
    assert "API_TOKEN=<redacted>, OTHER=<redacted>" in table.stdout
    for shown in (result, table):
        assert VALUE not in shown.stdout + shown.stderr
