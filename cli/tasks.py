"""Build a task from the command line: a YAML file or an inline command, plus overrides."""

from __future__ import annotations

from pathlib import Path

from orch.spec import (
    Overrides,
    Pipeline,
    SpecError,
    Task,
    apply_overrides,
    load_pipeline,
    looks_like_yaml,
    parse_env_flags,
    parse_task,
)


def task_from_args(entrypoint: str | None, overrides: Overrides) -> Task:
    """``entrypoint`` is a task YAML, or a shell command to run (SkyPilot's convention)."""
    if entrypoint is None:
        raise SpecError("command line", [("", "give a task YAML or a command to run")])
    if looks_like_yaml(entrypoint):
        pipeline = load_pipeline(entrypoint)
        if len(pipeline.tasks) != 1:
            raise SpecError(entrypoint, [("", f"holds a pipeline of {len(pipeline.tasks)} "
                                              "tasks; run pipelines with `orch jobs launch`")])
        task, source = pipeline.tasks[0], entrypoint
    else:
        task, source = parse_task({"run": entrypoint}, "command line", Path.cwd()), "command line"
    return apply_overrides(task, overrides, source)


def pipeline_from_args(entrypoint: str, overrides: Overrides) -> Pipeline:
    if not looks_like_yaml(entrypoint):
        task = task_from_args(entrypoint, overrides)
        return Pipeline(name=task.name, tasks=[task])
    pipeline = load_pipeline(entrypoint)
    tasks = [apply_overrides(t, overrides, entrypoint) for t in pipeline.tasks]
    return Pipeline(name=overrides.name or pipeline.name, tasks=tasks)


def overrides_from_flags(
    *, name: str | None = None, cloud: str | None, region: str | None, zone: str | None,
    instance_type: str | None, cpus: str | None, memory: str | None, gpus: str | None,
    num_nodes: int | None, use_spot: bool | None, env: list[str] | None,
    workdir: str | None = None,
) -> Overrides:
    return Overrides(
        name=name, cloud=cloud, region=region, zone=zone, instance_type=instance_type,
        cpus=cpus, memory=memory, gpus=gpus, num_nodes=num_nodes, use_spot=use_spot,
        envs=parse_env_flags(env or []), workdir=workdir,
    )
