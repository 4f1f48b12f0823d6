"""The edge cases of SkyPilot's forms, on ``orch.spec`` directly: infra, required envs and
env files, ``$VAR`` in paths, memory ratios, and every row of the refused-field table."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.tasks import overrides_from_flags, pipeline_from_args, task_from_args
from orch.spec import SpecError, Task, load_task, parse_env_file, parse_task
from orch.spec_infra import Location, parse_infra
from orch.spec_overrides import Overrides, apply_overrides
from orch.spec_unsupported import UNSUPPORTED


def problems(data: dict, **kwargs: object) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_task(data, "t.yaml", **kwargs)  # type: ignore[arg-type]
    return dict(caught.value.problems)


def place(data: dict) -> list[tuple[str | None, str | None, str | None]]:
    resources = parse_task(data, "t.yaml").resources
    return [(r.cloud, r.region, r.zone) for r in resources.alternatives()]


def flags(**given: object) -> Overrides:
    base: dict[str, object] = dict(cloud=None, region=None, zone=None, instance_type=None,
                                   cpus=None, memory=None, gpus=None, num_nodes=None,
                                   use_spot=None, env=None)
    return overrides_from_flags(**{**base, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    ("aws", Location("aws")),
    ("AWS/us-east-1", Location("aws", "us-east-1")),
    ("gcp/us-central1/us-central1-a", Location("gcp", "us-central1", "us-central1-a")),
    ("*", Location()),
    ("*/us-east-1", Location(None, "us-east-1")),
    ("aws/*/us-east-1a", Location("aws", None, "us-east-1a")),
    ("*/*/us-east-1a", Location(None, None, "us-east-1a")),
    ("local", Location("local")),
])
def test_infra_forms(text: str, expected: Location) -> None:
    assert parse_infra(text) == expected


@pytest.mark.parametrize(("value", "says"), [
    ("aws/us-east-1/us-east-1a/x", "CLOUD/REGION/ZONE"), ("aws//us-east-1a", "CLOUD/REGION"),
    ("aws/", "CLOUD/REGION"), ("", "CLOUD"), (3, "CLOUD"), (["aws"], "CLOUD"),
    ("k8s", "Kubernetes"), ("kubernetes/ctx:a/b", "Kubernetes"),
    ("lambda/us-east-1", "cloud 'lambda'"), ("gpc", "did you mean 'gcp'?"),
    ("zzz", "orch's clouds are local, aws, gcp, azure"),
])
def test_a_bad_infra_names_the_field_and_why(value: object, says: str) -> None:
    found = problems({"resources": {"infra": value}})
    assert list(found) == ["resources.infra"] and says in found["resources.infra"]
    if says.startswith(("Kubernetes", "cloud ")):
        assert "not supported by orch" in found["resources.infra"]


def test_infra_is_only_a_way_of_writing_cloud_region_zone() -> None:
    written = parse_task({"resources": {"infra": "aws/us-east-1"}}, "t.yaml")
    assert written == parse_task({"resources": {"cloud": "aws", "region": "us-east-1"}},
                                 "t.yaml")
    assert "infra" not in written.model_dump()["resources"]
    assert Task.model_validate(written.model_dump()) == written


def test_infra_agrees_with_fields_that_say_the_same_or_fill_its_wildcards() -> None:
    assert place({"resources": {"infra": "aws", "cloud": "AWS"}}) == [("aws", None, None)]
    assert place({"resources": {"infra": "*/us-east-1", "cloud": "aws"}}) == [
        ("aws", "us-east-1", None)]
    assert place({"resources": {"infra": "aws", "zone": "us-east-1a"}}) == [
        ("aws", None, "us-east-1a")]
    found = problems({"resources": {"infra": "aws/us-east-1/us-east-1a", "cloud": "gcp",
                                    "zone": "us-east-1b"}})
    assert "disagrees with cloud 'gcp' and zone 'us-east-1b'" in found["resources.infra"]


def test_an_any_of_entrys_infra_replaces_the_place_it_inherits() -> None:
    assert place({"resources": {"infra": "aws/us-east-1/us-east-1a", "any_of": [
        {"infra": "gcp"}, {"cpus": 4}, {"infra": "*/us-west-2"}]}}) == [
        ("gcp", None, None), ("aws", "us-east-1", "us-east-1a"), (None, "us-west-2", None)]
    found = problems({"resources": {"ordered": [{"infra": "aws"}, {"infra": "k8s"}]}})
    assert list(found) == ["resources.ordered[1].infra"]


def test_the_infra_flag_replaces_the_yaml_place_and_is_checked_on_its_own() -> None:
    task = parse_task({"resources": {"infra": "gcp/us-central1/us-central1-a"}}, "t.yaml")
    moved = apply_overrides(task, flags(infra="aws/us-east-1"))
    assert (moved.resources.cloud, moved.resources.region, moved.resources.zone) == (
        "aws", "us-east-1", None)
    agreed = apply_overrides(task, flags(infra="aws", region="us-west-2"))
    assert (agreed.resources.cloud, agreed.resources.region) == ("aws", "us-west-2")
    for bad, says in ((dict(infra="aws/a/b/c"), "CLOUD/REGION/ZONE"),
                      (dict(infra="aws/us-east-1", region="us-west-2"), "--region us-west-2"),
                      (dict(infra="k8s"), "not supported by orch")):
        with pytest.raises(SpecError) as caught:
            flags(**bad)
        assert caught.value.source == "--infra" and says in str(caught.value)


def test_the_infra_flag_reaches_every_task_of_a_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\n---\nrun: a\n---\nresources: {infra: gcp}\nrun: b\n")
    pipeline = pipeline_from_args(str(path), flags(infra="azure/eastus"))
    assert [(t.resources.cloud, t.resources.region) for t in pipeline.tasks] == [
        ("azure", "eastus"), ("azure", "eastus")]


def test_a_required_env_is_refused_until_the_command_line_gives_it(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("envs: {A: null, B: '', C: 1}\nrun: echo $A\n")
    with pytest.raises(SpecError) as caught:
        load_task(path)
    assert [f for f, _ in caught.value.problems] == ["envs.A", "envs.B"]
    assert "--env A=VALUE" in str(caught.value)
    task = task_from_args(str(path), flags(env=["A=1", "B=2"]))
    assert task.envs == {"A": "1", "B": "2", "C": "1"}
    with pytest.raises(SpecError, match="envs.B"):
        task_from_args(str(path), flags(env=["A=1", "B="]))


def test_an_env_file_gives_values_and_env_flags_win_over_it(tmp_path: Path) -> None:
    dotenv = tmp_path / "app.env"
    dotenv.write_text("\n".join([
        "# a comment", "", "A=from-file", "export B = spaced  # trailing comment",
        "C='single # kept $HOME'", 'D="line\\nbreak \\"q\\""', "E=", "F=a=b",
    ]))
    assert parse_env_file(dotenv) == {"A": "from-file", "B": "spaced",
                                      "C": "single # kept $HOME", "D": 'line\nbreak "q"',
                                      "E": "", "F": "a=b"}
    path = tmp_path / "t.yaml"
    path.write_text("envs: {A: null, B: yaml, G: yaml}\nrun: x\n")
    task = task_from_args(str(path), flags(env_file=str(dotenv), env=["B=flag"]))
    assert (task.envs["A"], task.envs["B"], task.envs["G"]) == ("from-file", "flag", "yaml")


@pytest.mark.parametrize(("text", "where"), [
    ("A=1\nnot a line\n", "line 2"), ('A="open\nB=2\n', "line 1"), ("1A=x\n", "line 1"),
    ("A='x' trailing\n", "line 1"),
])
def test_a_bad_env_file_names_the_line(tmp_path: Path, text: str, where: str) -> None:
    dotenv = tmp_path / "bad.env"
    dotenv.write_text(text)
    with pytest.raises(SpecError) as caught:
        parse_env_file(dotenv)
    assert caught.value.source == f"--env-file {dotenv}"
    assert [f for f, _ in caught.value.problems] == [where]


def test_a_missing_or_binary_env_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        parse_env_file(tmp_path / "none.env")
    with pytest.raises(SpecError, match="is a directory"):
        parse_env_file(tmp_path)
    (tmp_path / "bin.env").write_bytes(b"A=\x80\x00")
    with pytest.raises(SpecError, match="not UTF-8"):
        parse_env_file(tmp_path / "bin.env")


def test_env_flags_with_a_bad_name_are_blamed_on_the_flag() -> None:
    for bad in ("=x", "1A=x", "A B=x"):
        with pytest.raises(SpecError) as caught:
            flags(env=[bad])
        assert caught.value.source == "--env"


def test_envs_fill_file_mounts_and_workdir(tmp_path: Path) -> None:
    (tmp_path / "code-13b").mkdir()
    (tmp_path / "data-13b.txt").write_text("x")
    task = parse_task({
        "envs": {"SIZE": "13b", "DIR": "code"},
        "workdir": "${DIR}-$SIZE",
        "file_mounts": {"/ckpt/${SIZE}/$HOME_X": "data-${SIZE}.txt"},
    }, "t.yaml", tmp_path)
    assert task.workdir == str(tmp_path / "code-13b")
    assert task.file_mounts == {"/ckpt/13b/$HOME_X": str(tmp_path / "data-13b.txt")}
    with pytest.raises(SpecError, match="data-7b.txt does not exist"):
        parse_task({"envs": {"SIZE": "13b"}, "file_mounts": {"/d": "data-${SIZE}.txt"}},
                   "t.yaml", tmp_path, envs={"SIZE": "7b"})


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2]])
def test_an_env_value_that_is_a_mapping_or_a_list_is_refused(value: object) -> None:
    assert "expected a string or a number" in problems({"envs": {"A": value}})["envs"]


def test_memory_as_a_ratio_of_vcpus() -> None:
    resources = parse_task({"resources": {"cpus": "8+", "memory": "8X"}}, "t.yaml").resources
    assert (resources.cpus, resources.memory) == ("8+", "8x")
    assert resources.min_memory_gb() == 64 and resources.min_memory_gb(vcpus=2) == 16
    assert parse_task({"resources": {"memory": "0.5x"}}, "t").resources.memory == "0.5x"
    for bad in ("0x", "x", "8x+", "-2x"):
        assert "'x' (per vCPU)" in problems({"resources": {"memory": bad}})["resources.memory"]
    assert "'+'" in problems({"resources": {"cpus": "8x"}})["resources.cpus"]


# One YAML mapping per row of the table (the table and these stay in step).
ROWS: dict[str, dict] = {
    "config": {"config": {"docker": {"run_options": ["--shm-size=1g"]}}},
    "service": {"service": {"readiness_probe": "/"}},
    "volumes": {"volumes": {"/mnt/data": "my-volume"}},
    "resources.accelerator_args": {"resources": {"accelerator_args": {"tpu_vm": True}}},
    "resources.autostop.hook": {"resources": {"autostop": {"idle_minutes": 5,
                                                           "hook": "git push"}}},
    "resources.autostop.wait_for: none": {"resources": {"autostop": {"wait_for": "none"}}},
    "resources.volumes": {"resources": {"volumes": [{"path": "/m", "disk_size": 10}]}},
    "resources.image_id: docker:<image>": {"resources": {"image_id": "Docker:nvcr.io/x:1"}},
    "workdir: {url, ref}": {"workdir": {"url": "https://github.com/a/b", "ref": "v1"}},
}


def test_every_row_of_the_table_has_a_form_here() -> None:
    assert set(ROWS) == set(UNSUPPORTED)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_a_refused_skypilot_field_gets_its_rows_message(row: str, tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**ROWS[row], "run": "echo"}))
    with pytest.raises(SpecError) as caught:
        load_task(path)
    (field, message), = caught.value.problems
    assert message.endswith(UNSUPPORTED[row]) and "unknown field" not in message
    assert row.split(":")[0].removeprefix("file_mounts").strip(".").startswith(field) or (
        field == "file_mounts")


@pytest.mark.parametrize("where", ["any_of", "ordered"])
def test_refused_resources_fields_are_refused_inside_alternatives_too(where: str) -> None:
    found = problems({"resources": {where: [{"cpus": 2}, {"accelerator_args": {"a": "b"}}]}})
    assert found == {f"resources.{where}[1].accelerator_args":
                     UNSUPPORTED["resources.accelerator_args"]}


def test_a_task_level_field_is_not_taken_for_a_resources_one() -> None:
    # `labels` is only a resources field in SkyPilot: at the top it is simply unknown.
    assert problems({"labels": {"a": "b"}})["labels"].startswith("unknown field")


def test_an_up_cluster_fits_a_memory_ratio_by_its_nodes_cpus() -> None:
    from orch.clouds.base import ClusterInfo, NodeInfo
    from orch.fit import misfit
    from orch.records import ClusterRecord

    node = NodeInfo(instance_id="i", internal_ip="10.0.0.1", is_head=True, cpus=8,
                    memory_gb=32)
    record = ClusterRecord(name="c", info=ClusterInfo(cloud="aws", region="r", nodes=[node]))
    assert misfit(parse_task({"resources": {"memory": "4x"}}, "t"), record) is None
    why = misfit(parse_task({"resources": {"memory": "8x"}}, "t"), record)
    assert why is not None and "64 GB per node (memory 8x), but" in why
