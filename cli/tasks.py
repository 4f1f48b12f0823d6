"""Build a task from the command line: a YAML file or an inline command, plus overrides."""

from __future__ import annotations

from pathlib import Path

from orch.secret import SecretValue
from orch.spec import (
    Pipeline,
    SpecError,
    Task,
    load_pipeline,
    looks_like_yaml,
    parse_env_file,
    parse_env_flags,
    parse_task,
)
from orch.spec_overrides import Overrides, apply_overrides, check_infra_flag


def task_from_args(entrypoint: str | None, overrides: Overrides) -> Task:
    """``entrypoint`` is a task YAML, or a shell command to run (SkyPilot's convention)."""
    if entrypoint is None:
        raise SpecError("command line", [("", "give a task YAML or a command to run")])
    if looks_like_yaml(entrypoint):
        pipeline = load_pipeline(entrypoint, envs=overrides.envs, secrets=overrides.secrets)
        if len(pipeline.tasks) != 1:
            raise SpecError(entrypoint, [("", f"holds a pipeline of {len(pipeline.tasks)} "
                                              "tasks; run pipelines with `orch jobs launch`")])
        task, source = pipeline.tasks[0], entrypoint
    else:
        task = parse_task({"run": entrypoint}, "command line", Path.cwd(), envs=overrides.envs,
                          secrets=overrides.secrets)
        source = "command line"
    return apply_overrides(task, overrides, source)


def pipeline_from_args(entrypoint: str, overrides: Overrides) -> Pipeline:
    if not looks_like_yaml(entrypoint):
        task = task_from_args(entrypoint, overrides)
        return Pipeline(name=task.name, tasks=[task])
    pipeline = load_pipeline(entrypoint, envs=overrides.envs, secrets=overrides.secrets)
    tasks = [apply_overrides(t, overrides, entrypoint) for t in pipeline.tasks]
    return Pipeline(name=overrides.name or pipeline.name, tasks=tasks)


def overrides_from_flags(
    *, name: str | None = None, infra: str | None = None, cloud: str | None,
    region: str | None, zone: str | None, instance_type: str | None, cpus: str | None,
    memory: str | None, gpus: str | None, num_nodes: int | None, use_spot: bool | None,
    env: list[str] | None, env_file: str | None = None, workdir: str | None = None,
    secret: list[str] | None = None, disk_size: str | None = None,
    disk_tier: str | None = None, network_tier: str | None = None,
    image_id: str | None = None, ports: list[str] | None = None,
) -> Overrides:
    """The flags, checked on their own first (a mistake in one is blamed on the flag)."""
    check_infra_flag(infra, cloud=cloud, region=region, zone=zone)
    envs = {**(parse_env_file(env_file) if env_file else {}), **parse_env_flags(env or [])}
    return Overrides(
        name=name, infra=infra, cloud=cloud, region=region, zone=zone,
        instance_type=instance_type, cpus=cpus, memory=memory, gpus=gpus,
        num_nodes=num_nodes, use_spot=use_spot, envs=envs, workdir=workdir,
        disk_size=disk_size, disk_tier=disk_tier, network_tier=network_tier,
        image_id=image_id, ports=ports or None,
        secrets={name: SecretValue(value)
                 for name, value in parse_env_flags(secret or [], source="--secret").items()},
    )
