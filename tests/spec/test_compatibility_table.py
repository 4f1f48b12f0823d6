"""docs/skypilot-compatibility.md stays true: every field and flag of SkyPilot's (below,
from its yaml-spec and CLI reference) has a row, and every row names a test that runs
here and agrees with the row (a supported form plans, a refused one is refused)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.spec.test_skypilot_yaml import ACCEPTED, FLAGS, PIPELINES, REFUSED

TABLE = Path(__file__).parents[2] / "docs" / "skypilot-compatibility.md"
HERE = Path(__file__).parent

# SkyPilot 0.10's task YAML fields and sky launch / exec / jobs launch flags.
SKYPILOT_FIELDS = (
    "name", "workdir", "num_nodes", "resources.infra", "resources.autostop",
    "resources.accelerators", "resources.accelerator_args", "resources.cpus",
    "resources.memory", "resources.instance_type", "resources.use_spot", "resources.disk_size",
    "resources.disk_tier", "resources.network_tier", "resources.max_hourly_cost",
    "resources.ports", "resources.image_id", "resources.labels", "resources.any_of",
    "resources.ordered", "resources.job_recovery", "resources.volumes", "envs", "secrets",
    "volumes", "file_mounts", "setup", "run", "config", "service",
)
SKYPILOT_FLAGS = (
    "--cluster", "--dryrun", "--detach-run", "--yes", "--idle-minutes-to-autostop",
    "--retry-until-up", "--infra", "--cloud", "--region", "--zone", "--instance-type",
    "--cpus", "--memory", "--gpus", "--num-nodes", "--use-spot", "--disk-size", "--disk-tier",
    "--network-tier", "--image-id", "--ports", "--env", "--env-file", "--secret", "--workdir",
    "--name", "--no-setup", "--fast", "--clone-disk-from", "--async", "--config", "--git-url",
    "--git-ref", "sky exec", "sky jobs launch", "sky jobs launch --pool",
)
STATUSES = ("supported", "supported differently", "refused")
ROW = re.compile(r"^\|\s*(.+?)\s*\|\s*(.+?)\s*\|\s*(.*?)\s*\|\s*`(.+?)`\s*\|$")


def rows() -> list[tuple[str, str, str]]:
    found = []
    for line in TABLE.read_text().splitlines():
        match = ROW.match(line)
        if match and match.group(1) != "SkyPilot":
            found.append((match.group(1), match.group(2), match.group(4)))
    return found


def test_every_skypilot_field_and_flag_has_a_row() -> None:
    written = " ".join(name for name, _, _ in rows())
    missing = [f for f in SKYPILOT_FIELDS + SKYPILOT_FLAGS if f"`{f}" not in written]
    assert not missing, missing


def test_every_row_has_a_status() -> None:
    assert rows() and all(status in STATUSES for _, status, _ in rows())


def _test_functions(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize(("name", "status", "test"), rows(), ids=[r[0] for r in rows()])
def test_a_rows_test_exists_and_agrees_with_it(name: str, status: str, test: str) -> None:
    refused = status == "refused"
    if test.startswith("flag "):
        flag = test.removeprefix("flag ")
        assert flag in FLAGS, f"{name}: no FLAGS case {flag!r}"
        assert (FLAGS[flag][3] is None) is refused, f"{name}: the case disagrees with {status}"
    elif "::" in test:
        file, function = test.split("::")
        assert function in _test_functions(HERE / file), f"{name}: no test {test}"
    else:
        if refused:
            assert test in REFUSED, f"{name}: {test} is not a refused case"
        else:
            assert test in ACCEPTED or test in PIPELINES, f"{name}: {test} is not a planned case"
