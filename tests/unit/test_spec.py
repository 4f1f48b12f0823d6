"""The task spec: SkyPilot's YAML, validation errors that name file and field, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from orch.spec import (
    RecoveryStrategy,
    SpecError,
    load_pipeline,
    load_task,
    parse_env_flags,
    parse_task,
)
from orch.spec_overrides import Overrides, apply_overrides


def write(tmp_path: Path, text: str, name: str = "task.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_full_skypilot_task_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "code").mkdir()
    (tmp_path / "data.txt").write_text("x")
    task = load_task(write(tmp_path, """
name: train
workdir: code
num_nodes: 2
resources:
  cloud: AWS
  region: us-east-1
  instance_type: p3.2xlarge
  cpus: 8+
  memory: 32GB
  accelerators: V100:1
  use_spot: true
  disk_size: 100
  ports: [8080, "9000-9010"]
  job_recovery: failover
envs:
  EPOCHS: 3
file_mounts:
  /data/in.txt: data.txt
setup: pip install -r requirements.txt
run: python train.py
"""))
    assert task.name == "train" and task.num_nodes == 2
    assert task.workdir == str(tmp_path / "code")
    assert task.file_mounts == {"/data/in.txt": str(tmp_path / "data.txt")}
    assert task.envs == {"EPOCHS": "3"}
    r = task.resources
    assert (r.cloud, r.cpus, r.memory, r.accelerators) == ("aws", "8+", "32", {"V100": 1})
    assert r.ports == ["8080", "9000-9010"] and r.use_spot and r.disk_size == 100
    assert r.job_recovery is not None and r.job_recovery.strategy == RecoveryStrategy.FAILOVER


def test_unknown_field_names_the_file_the_field_and_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "resources:\n  cpu: 4\nnum_node: 2\nrun: echo\n")
    with pytest.raises(SpecError) as error:
        load_task(path)
    text = str(error.value)
    assert str(path) in text
    assert "resources.cpu: unknown field; did you mean 'cpus'?" in text
    assert "num_node: unknown field; did you mean 'num_nodes'?" in text


@pytest.mark.parametrize(("yaml_text", "field", "expected"), [
    ("num_nodes: two", "num_nodes", "whole number"),
    ("num_nodes: 0", "num_nodes", "greater than or equal to 1"),
    ("resources:\n  cpus: lots", "resources.cpus", "positive number"),
    ("resources:\n  accelerators: ':4'", "resources.accelerators", "NAME or NAME:COUNT"),
    ("resources:\n  ports: [http]", "resources.ports", "port"),
    ("envs:\n  1BAD: x", "envs", "not a valid environment variable name"),
    ("workdir: /no/such/dir", "workdir", "not a directory"),
    ("file_mounts:\n  /remote: /no/such/file", "file_mounts./remote", "does not exist"),
    ("resources:\n  job_recovery: sometimes", "resources.job_recovery.strategy", "FAILOVER"),
])
def test_invalid_values_are_reported_by_field(
    tmp_path: Path, yaml_text: str, field: str, expected: str
) -> None:
    with pytest.raises(SpecError) as error:
        load_task(write(tmp_path, yaml_text + "\n"))
    fields = dict(error.value.problems)
    assert field in fields, error.value.problems
    assert expected in fields[field]


def test_broken_yaml_and_missing_files_are_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        load_task(write(tmp_path, "run: [unclosed\n"))
    with pytest.raises(SpecError, match="no such file"):
        load_task(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_task(write(tmp_path, "- a list\n"))


def test_accelerator_forms() -> None:
    def accelerators(value):  # type: ignore[no-untyped-def]
        return parse_task({"resources": {"accelerators": value}}, "t").resources

    assert accelerators("A100").accelerators == {"A100": 1}
    assert accelerators({"A100": 8}).accelerators == {"A100": 8}
    ordered = accelerators(["A100:8", "V100:8"])
    assert ordered.is_ordered
    assert [a.accelerators for a in ordered.alternatives()] == [{"A100": 8}, {"V100": 8}]
    any_of = accelerators({"A100:8": None, "H100:8": None})  # YAML's {A100:8, H100:8}
    assert [a.accelerators for a in any_of.alternatives()] == [{"A100": 8}, {"H100": 8}]


def test_any_of_alternatives_inherit_the_base_fields() -> None:
    task = parse_task({"resources": {"cpus": 4, "any_of": [{"cloud": "aws"},
                                                            {"cloud": "gcp", "cpus": 8}]}}, "t")
    alternatives = task.resources.alternatives()
    assert [(a.cloud, a.cpus) for a in alternatives] == [("aws", "4"), ("gcp", "8")]


def test_pipeline_with_a_name_document(tmp_path: Path) -> None:
    pipeline = load_pipeline(write(tmp_path, "name: pipe\n---\nrun: echo a\n---\nrun: echo b\n"))
    assert pipeline.name == "pipe"
    assert [t.run for t in pipeline.tasks] == ["echo a", "echo b"]


def test_a_pipeline_error_names_the_task(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as error:
        load_pipeline(write(tmp_path, "run: echo a\n---\nnum_nodes: -1\n"))
    assert "task[1].num_nodes" in dict(error.value.problems)


def test_overrides_win_over_the_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    task = parse_task({"num_nodes": 1, "envs": {"A": "1"},
                       "resources": {"cloud": "aws", "accelerators": ["A100", "V100"]}}, "t")
    monkeypatch.setenv("FROM_ENV", "yes")
    overridden = apply_overrides(task, Overrides(
        cloud="gcp", num_nodes=3, gpus="H100:8", cpus="16+",
        envs=parse_env_flags(["B=2", "FROM_ENV"])))
    assert overridden.num_nodes == 3
    assert overridden.resources.cloud == "gcp"
    assert overridden.resources.accelerators == {"H100": 8}
    assert overridden.resources.ordered is None
    assert overridden.resources.cpus == "16+"
    assert overridden.envs == {"A": "1", "B": "2", "FROM_ENV": "yes"}


def test_bad_overrides_are_spec_errors() -> None:
    task = parse_task({"run": "x"}, "t")
    with pytest.raises(SpecError) as error:
        apply_overrides(task, Overrides(num_nodes=0), "command line")
    assert "num_nodes" in dict(error.value.problems)
    with pytest.raises(SpecError, match="not set in the environment"):
        parse_env_flags(["SURELY_NOT_SET_ANYWHERE_123"])
