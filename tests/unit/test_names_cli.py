"""The CLI refuses names outside SkyPilot's rule before anything starts: exit 2, a message
naming the flag (or the file and field) and the rule, no control plane started."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.bulk import _unknown
from orch.client import Client
from orch.client.managed_jobs import ManagedJobs
from orch.names import RULE, InvalidNameError
from orch.spec import Task
from tests.spec.test_secrets import orch  # the CLI in its own ORCH_HOME (tmp_path)


def assert_nothing_started(home: Path, *inputs: str) -> None:
    """ORCH_HOME holds nothing but the test's own files: no embedded control plane was
    started (its files live there), no control-plane id was made."""
    assert sorted(p.name for p in home.iterdir()) == sorted(inputs)


@pytest.mark.parametrize("args", [
    ("launch", "--dryrun", "-c", "bad;name", "echo hi"),
    ("launch", "--yes", "--cluster", "bad;name", "echo hi"),
])
def test_launch_refuses_a_bad_cluster_name(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = orch(tmp_path, *args)

    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())  # rich wraps long lines
    assert "--cluster (-c): invalid cluster name" in message
    assert "'bad;name' has ';'" in message and "starting with a letter" in message
    assert_nothing_started(tmp_path)


def test_a_dryrun_with_a_good_name_still_plans(tmp_path: Path) -> None:
    result = orch(tmp_path, "launch", "--dryrun", "-c", "Good_name.2", "--cloud", "local",
                  "echo hi")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("dryrun", [(), ("--dryrun",)])
def test_jobs_launch_refuses_a_bad_name_flag(tmp_path: Path, dryrun: tuple[str, ...]) -> None:
    result = orch(tmp_path, "jobs", "launch", *dryrun, "--yes", "-n", "1bad", "echo hi")

    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "--name (-n): invalid managed-job name" in message
    assert "'1bad' does not start with a letter" in message
    assert_nothing_started(tmp_path)


def test_jobs_launch_refuses_a_bad_name_in_the_yaml(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: 1train\nrun: echo hi\n")  # a valid task name

    result = orch(tmp_path, "jobs", "launch", "--yes", "job.yaml")

    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "job.yaml: invalid managed-job name" in message
    assert "name: '1train' does not start with a letter" in message
    assert_nothing_started(tmp_path, "job.yaml")


def test_an_unknown_cluster_with_a_bad_name_is_told_the_rule() -> None:
    assert _unknown("bad;name", ["bad-name"], {}) == (
        "cluster bad;name does not exist (did you mean bad-name?), and is not a valid "
        "cluster name: 'bad;name' has ';'; use " + RULE + "; orch status lists the clusters")
    assert "valid" not in _unknown("fine", [], {})


class _NoTemporal:
    """Stands for a Temporal client: any use of it fails the test."""

    namespace = "default"

    class service_client:  # noqa: N801 (the attribute's name)
        class config:  # noqa: N801
            target_host = "nowhere:7233"

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"Temporal was used ({name}) for a name that is refused")


async def test_the_python_api_refuses_bad_names_before_any_call() -> None:
    client = Client(_NoTemporal())  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError, match=r"cluster: invalid cluster name"):
        await client.launch(Task(run="echo hi"), "bad;name")
    with pytest.raises(InvalidNameError, match=r"managed job: invalid managed-job name"):
        await ManagedJobs(client).launch([Task(run="echo hi")], "1bad")
    with pytest.raises(InvalidNameError, match=r"'9lives' does not start with a letter"):
        await ManagedJobs(client).launch([Task(name="9lives", run="echo hi")])
