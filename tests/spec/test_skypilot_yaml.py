"""SkyPilot task YAMLs, one per form (tests/spec/skypilot_yaml/, each naming the doc page or
example it mirrors), through the real ``orch launch --dryrun`` console script: the forms
orch supports plan where they say, the others exit 2 with their message, no traceback,
and no control plane is started for either."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orch.server import ControlPlane

ORCH = str(Path(sys.executable).parent / "orch")
HERE = Path(__file__).parent / "skypilot_yaml"

Plan = list[dict[str, Any]]


def _clouds(plan: Plan) -> set[str]:
    return {c["cloud"] for c in plan}


def _regions(plan: Plan) -> set[str]:
    return {c["region"] for c in plan}


def _sized_by_default(plan: Plan) -> bool:
    """SkyPilot's default (8+ vCPUs, 4 GiB per vCPU) on every cloud candidate."""
    clouds = [c for c in plan if c["cloud"] != "local"]
    return bool(clouds) and all(c["cpus"] >= 8 and c["memory_gb"] >= 4 * c["cpus"]
                                for c in clouds) and min(c["cpus"] for c in clouds) == 8


# Azure sizes with premium storage: an "s" among the feature letters (Standard_D4s_v5).
_AZURE_PREMIUM = re.compile(r"^Standard_[A-Z]+\d+(-\d+)?[a-z]*s[a-z]*(_|$)")


# file → (extra arguments, what the plan must show)
ACCEPTED: dict[str, tuple[list[str], Callable[[Plan], bool]]] = {
    "infra_cloud.yaml": ([], lambda p: _clouds(p) == {"aws"} and len(_regions(p)) > 1),
    "infra_region.yaml": ([], lambda p: (_clouds(p), _regions(p)) == ({"gcp"}, {"us-central1"})),
    "infra_zone.yaml": ([], lambda p: (_clouds(p), _regions(p)) == ({"aws"}, {"us-east-1"})
                        and all(c["zones"] == ["us-east-1a"] for c in p)),
    "infra_any_cloud.yaml": ([], lambda p: _regions(p) == {"us-east-1"}),
    "infra_any_region.yaml": ([], lambda p: (_clouds(p), _regions(p)) == ({"aws"}, {"us-east-1"})
                              and all(c["zones"] == ["us-east-1a"] for c in p)),
    "any_of_infra.yaml": ([], lambda p: {(c["cloud"], c["region"]) for c in p}
                          == {("aws", "us-west-2"), ("gcp", "us-central1")}),
    "ordered_infra.yaml": ([], lambda p: p[0]["region"] == "us-west-2"
                           and _regions(p) == {"us-west-2", "us-east-1"}),
    "cpus_memory_ratio.yaml": ([], lambda p: _clouds(p) == {"aws"} and all(
        c["cpus"] >= 8 and c["memory_gb"] >= 8 * c["cpus"] for c in p)),
    "default_resources.yaml": ([], _sized_by_default),
    "envs_required.yaml": (["--env", "HF_TOKEN=hf_x", "--env", "MODEL=llama"],
                           lambda p: _clouds(p) == {"local"}),
    "envs_in_file_mounts.yaml": ([], lambda p: _clouds(p) == {"local"}),
    "disk_network_tiers.yaml": ([], lambda p: _clouds(p) == {"azure"} and all(
        _AZURE_PREMIUM.match(c["instance_type"]) for c in p)),
    "max_hourly_cost.yaml": ([], lambda p: _clouds(p) == {"aws"} and all(
        c["price_per_node"] <= 0.2 for c in p) and min(c["cpus"] for c in p) >= 4),
    "labels.yaml": ([], lambda p: {"aws", "gcp", "azure"} <= _clouds(p)),
    "autostop_forms.yaml": ([], lambda p: bool(p)),
    "image_id_per_region.yaml": ([], lambda p: (_clouds(p), _regions(p))
                                 == ({"aws"}, {"us-east-1", "us-west-2"})),
    "accelerators_set_any_of.yaml": ([], lambda p: {
        (c["cloud"], *c["accelerators"]) for c in p} == {
        ("aws", "L4"), ("aws", "T4"), ("gcp", "L4"), ("gcp", "T4")}),
    "sizes_with_units.yaml": ([], lambda p: all(c["memory_gb"] >= 64 for c in p)),
    "legacy_cloud_region.yaml": ([], lambda p: (_clouds(p), _regions(p)) == (
        {"aws"}, {"us-east-1"}) and all(c["zones"] == ["us-east-1b"] for c in p)),
    "accelerators_list.yaml": ([], lambda p: [next(iter(c["accelerators"])) for c in p][0]
                               == "L4" and {next(iter(c["accelerators"])) for c in p}
                               == {"L4", "T4"}),
    "storage_mounts.yaml": ([], lambda p: _clouds(p) == {"aws"}),
    "instance_type_spot_ports.yaml": ([], lambda p: {(c["instance_type"], c["use_spot"],
                                                      c["num_nodes"]) for c in p}
                                      == {("m6i.xlarge", True, 2)}),
}

# file → (extra arguments, what stderr must say)
REFUSED: dict[str, tuple[list[str], list[str]]] = {
    "envs_required.yaml": ([], ["envs.HF_TOKEN: required", "envs.MODEL: required",
                                "--env HF_TOKEN=VALUE"]),
    "infra_kubernetes.yaml": ([], ["resources.infra", "Kubernetes", "not supported by orch"]),
    "infra_malformed.yaml": ([], ["resources.infra", "CLOUD/REGION/ZONE", "aws/*/us-east-1a"]),
    "infra_conflict.yaml": ([], ["resources.infra", "disagrees with region 'us-west-2'"]),
    "infra_unknown_cloud.yaml": ([], ["resources.infra", "did you mean 'aws'?"]),
    "docker_image.yaml": ([], ["resources.image_id", "SkyPilot field resources.image_id: "
                                                     "docker:<image> is not supported by orch"]),
    "git_workdir.yaml": ([], ["SkyPilot field workdir: {url, ref} is not supported by orch"]),
    "storage_refused.yaml": ([], [
        "file_mounts./r2.source: SkyPilot store r2 (Cloudflare R2) is not supported by orch",
        "file_mounts./ibm.store: SkyPilot store ibm (IBM COS) is not supported by orch",
        "file_mounts./both: name is not given with a bucket URI source",
        "file_mounts./copy: mode COPY copies a source"]),
    "service.yaml": ([], ["service: SkyPilot field service is not supported by orch"]),
    "secrets.yaml": ([], ["secrets.HF_TOKEN: required", "secrets.WANDB_API_KEY: required",
                          "--secret HF_TOKEN=VALUE"]),
    "unsupported_resources.yaml": ([], [
        f"{field}: SkyPilot field {field} is not supported by orch" for field in (
            "config", "resources.accelerator_args")]),
    "autostop_hook.yaml": ([], ["resources.autostop: SkyPilot field resources.autostop.hook "
                                "is not supported by orch"]),
    "disk_tier_ultra_azure.yaml": ([], ["azure: no instance type that fits boots from "
                                        "disk_tier ultra"]),
    "max_hourly_cost_too_low.yaml": ([], ["above max_hourly_cost $1"]),
    "labels_bad_for_gcp.yaml": ([], ["resources.labels: label 'Project': GCP label keys",
                                     "with no cloud named"]),
    "volumes.yaml": ([], ["volumes: SkyPilot field volumes is not supported by orch"]),
    "infra_cloud.yaml": (["--infra", "k8s/my-context"], ["--infra", "not supported by orch"]),
    "infra_region.yaml": (["--infra", "aws", "--cloud", "gcp"],
                          ["--infra aws disagrees with --cloud gcp"]),
}


LAUNCH = ("launch", "--dryrun", "--json")
JOBS = ("jobs", "launch", "--dryrun", "--json")
# SkyPilot's CLI flags: flag → (command, YAML, arguments, what the plan shows or None when
# the flag is refused; a refused flag's message is "SkyPilot flag X is not supported").
FLAGS: dict[str, tuple[tuple[str, ...], str, list[str], Callable[[Plan], bool] | None]] = {
    "--infra": (LAUNCH, "default_resources.yaml", ["--infra", "gcp/us-central1"],
                lambda p: (_clouds(p), _regions(p)) == ({"gcp"}, {"us-central1"})),
    "--cloud": (LAUNCH, "default_resources.yaml", ["--cloud", "azure"],
                lambda p: _clouds(p) == {"azure"}),
    "--region": (LAUNCH, "infra_cloud.yaml", ["--region", "eu-west-1"],
                 lambda p: _regions(p) == {"eu-west-1"}),
    "--zone": (LAUNCH, "infra_cloud.yaml", ["--zone", "us-east-1c"],
               lambda p: all(c["zones"] == ["us-east-1c"] for c in p)),
    "--instance-type": (LAUNCH, "infra_cloud.yaml", ["-t", "c6i.2xlarge"],
                        lambda p: {c["instance_type"] for c in p} == {"c6i.2xlarge"}),
    "--cpus": (LAUNCH, "infra_cloud.yaml", ["--cpus", "16+"],
               lambda p: min(c["cpus"] for c in p) >= 16),
    "--memory": (LAUNCH, "infra_cloud.yaml", ["--memory", "128+"],
                 lambda p: min(c["memory_gb"] for c in p) >= 128),
    "--gpus": (LAUNCH, "infra_cloud.yaml", ["--gpus", "A100:8"],
               lambda p: {tuple(c["accelerators"].items()) for c in p} == {(("A100", 8),)}),
    "--num-nodes": (LAUNCH, "infra_cloud.yaml", ["--num-nodes", "3"],
                    lambda p: {c["num_nodes"] for c in p} == {3}),
    "--use-spot": (LAUNCH, "infra_cloud.yaml", ["--use-spot"],
                   lambda p: all(c["use_spot"] for c in p)),
    "--disk-size": (LAUNCH, "infra_cloud.yaml", ["--disk-size", "1TB"], bool),
    "--disk-tier": (LAUNCH, "default_resources.yaml", ["--disk-tier", "ultra"],
                    lambda p: "azure" not in _clouds(p) and bool(p)),
    "--network-tier": (LAUNCH, "infra_cloud.yaml", ["--network-tier", "best"], bool),
    "--image-id": (LAUNCH, "infra_cloud.yaml", ["--image-id", "ami-0868a20f5a3bf9702"], bool),
    "--ports": (LAUNCH, "infra_cloud.yaml", ["--ports", "8080", "--ports", "9000-9010"], bool),
    "--env": (LAUNCH, "envs_required.yaml", ["--env", "HF_TOKEN=x", "--env", "MODEL=m"],
              bool),
    "--env-file": (LAUNCH, "envs_required.yaml", ["--env-file", "required.env"], bool),
    "--secret": (LAUNCH, "secrets.yaml", ["--secret", "HF_TOKEN=x", "--secret",
                                          "WANDB_API_KEY=y"],
                 lambda p: p[0]["secrets"] == {"HF_TOKEN": "<redacted>",
                                               "WANDB_API_KEY": "<redacted>"}),
    "--workdir": (LAUNCH, "default_resources.yaml", ["--workdir", "."], bool),
    "--name": (LAUNCH, "default_resources.yaml", ["-n", "renamed"], bool),
    "--cluster": (LAUNCH, "default_resources.yaml", ["-c", "my-cluster"], bool),
    "--idle-minutes-to-autostop": (LAUNCH, "default_resources.yaml", ["-i", "10", "--down"],
                                   bool),
    "--retry-until-up": (LAUNCH, "default_resources.yaml", ["--retry-until-up"], bool),
    "--detach-run": (LAUNCH, "default_resources.yaml", ["-d", "-y"], bool),
    "jobs launch --name": (JOBS, "job_recovery_forms.yaml", ["-n", "renamed"], bool),
    **{flag: (("launch",), "default_resources.yaml", [flag], None)
       for flag in ("--no-setup", "--fast", "--clone-disk-from", "--async", "--config",
                    "--git-url", "--git-ref")},
    "jobs launch --pool": (("jobs", "launch"), "default_resources.yaml", ["--pool"], None),
    "exec --async": (("exec", "c1"), "default_resources.yaml", ["--async"], None),
}

# pipelines, through `orch jobs launch --dryrun --json`: file → what each task's plan shows
PIPELINES: dict[str, Callable[[list[dict[str, Any]]], bool]] = {
    "job_recovery_forms.yaml": lambda tasks: [t["name"] for t in tasks] == ["first", "second"]
    and all(_clouds(t["candidates"]) == {"aws"} for t in tasks)
    and all(c["use_spot"] for c in tasks[1]["candidates"]),
}

def dryrun(home: Path, name: str, *args: str,
           command: tuple[str, ...] = ("launch", "--dryrun", "--json")
           ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCH_HOME": str(home), "COLUMNS": "200"}
    for key in ("TEMPORAL_ADDRESS", "ORCH_CONFIG"):
        env.pop(key, None)
    result = subprocess.run([ORCH, *command, str(HERE / name), *args],
                            env=env, cwd=HERE, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stderr + result.stdout
    assert ControlPlane(home).state() is None and not (home / "server").exists(), (
        "a dry run started a control plane")
    return result


def test_every_yaml_here_is_checked_and_names_what_it_mirrors() -> None:
    files = sorted(p.name for p in HERE.glob("*.yaml"))
    assert set(files) == set(ACCEPTED) | set(REFUSED) | set(PIPELINES)
    for name in files:
        first = (HERE / name).read_text().splitlines()[0]
        assert first.startswith("# Mirrors "), name


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_an_accepted_form_plans_where_it_says(name: str, tmp_path: Path) -> None:
    args, check = ACCEPTED[name]
    result = dryrun(tmp_path, name, *args)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan and check(plan), json.dumps(plan[:5], indent=1)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_form_exits_2_with_its_message(name: str, tmp_path: Path) -> None:
    args, expected = REFUSED[name]
    result = dryrun(tmp_path, name, *args)
    message = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stdout + result.stderr
    for text in expected:
        assert text in message, message
    assert "unknown field" not in message and "did you mean" not in message.replace(
        "did you mean 'aws'?", "")


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_skypilot_flag_is_taken_or_refused_by_name(flag: str, tmp_path: Path) -> None:
    command, name, args, check = FLAGS[flag]
    result = dryrun(tmp_path, name, *args, command=command)
    if check is None:
        shown = flag.split()[-1]
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"SkyPilot flag {shown} is not supported by orch" in " ".join(
            result.stderr.split())
        return
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    plan = plan[0]["candidates"] if command == JOBS else plan
    assert plan and check(plan), json.dumps(plan[:3], indent=1)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_pipeline_plans_every_task_without_a_control_plane(name: str, tmp_path: Path
                                                             ) -> None:
    result = dryrun(tmp_path, name, command=("jobs", "launch", "--dryrun", "--json"))
    assert result.returncode == 0, result.stderr
    tasks = json.loads(result.stdout)
    assert PIPELINES[name](tasks), json.dumps(tasks, indent=1)[:2000]


def test_a_pipeline_dry_run_blames_the_flag_it_cannot_plan(tmp_path: Path) -> None:
    # A task of the file itself is named as task[i] (tests/spec/test_bad_input.py).
    result = dryrun(tmp_path, "job_recovery_forms.yaml", "--gpus", "Z100:1",
                    command=("jobs", "launch", "--dryrun"))
    assert result.returncode == 2 and result.stderr.startswith("Error: --gpus"), result.stderr
    assert "unknown accelerator 'Z100'" in result.stderr


def test_an_env_file_gives_the_required_envs(tmp_path: Path) -> None:
    result = dryrun(tmp_path, "envs_required.yaml", "--env-file", "required.env")
    assert result.returncode == 0, result.stderr
    missing = dryrun(tmp_path, "envs_required.yaml", "--env-file", "nope.env")
    assert missing.returncode == 2 and "--env-file nope.env" in missing.stderr


def test_jobs_launch_takes_the_same_flags_and_checks_them_before_starting(
        tmp_path: Path) -> None:
    result = dryrun(tmp_path, "infra_cloud.yaml", "--infra", "kubernetes", "-y",
                    command=("jobs", "launch"))
    assert result.returncode == 2 and "not supported by orch" in result.stderr
    result = dryrun(tmp_path, "envs_required.yaml", "--env-file", "required.env",
                    "--infra", "aws/nowhere-1", "-y", command=("jobs", "launch"))
    assert result.returncode == 2 and "unknown region 'nowhere-1'" in result.stderr


RESOURCE_FLAGS = ("--infra", "--cloud", "--region", "--zone", "--instance-type", "--cpus",
                  "--memory", "--gpus", "--num-nodes", "--use-spot", "--disk-size",
                  "--disk-tier", "--network-tier", "--image-id", "--ports", "--env",
                  "--env-file", "--secret", "--workdir")


@pytest.mark.parametrize("command", [("exec",), ("jobs", "launch")])
def test_exec_and_jobs_launch_take_the_resource_flags_of_launch(command: tuple[str, ...]
                                                                ) -> None:
    shown = subprocess.run([ORCH, *command, "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"}, timeout=60)
    assert shown.returncode == 0, shown.stderr
    missing = [flag for flag in RESOURCE_FLAGS if flag not in shown.stdout]
    assert not missing, missing
