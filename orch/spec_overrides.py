"""Command-line flags that override a task's YAML (``orch launch --cloud aws task.yaml``),
applied by SkyPilot's rules: ``--infra`` replaces the whole place, ``--gpus`` the
accelerator choices, ``--env`` adds to (and wins over) the task's envs, ``--secret`` to
its secrets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orch.secret import Secret
from orch.spec import SpecError, Task, parse_task
from orch.spec_infra import conflicts, parse_infra


class Overrides(BaseModel):
    """Command-line flags that override a task's YAML (``None`` = not given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    infra: str | None = None
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    cpus: str | None = None
    memory: str | None = None
    gpus: str | None = None
    num_nodes: int | None = None
    use_spot: bool | None = None
    disk_size: str | None = None
    disk_tier: str | None = None
    network_tier: str | None = None
    image_id: str | None = None
    ports: list[str] | None = None
    envs: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, Secret] = Field(default_factory=dict)
    workdir: str | None = None


def apply_overrides(task: Task, overrides: Overrides, source: str = "command line") -> Task:
    """Return ``task`` with the flags applied, validated again as a whole."""
    data = task.model_dump(exclude_unset=True)
    resources = dict(data.get("resources", {}))
    if overrides.infra is not None:  # the whole place, as SkyPilot's --infra
        resources = {k: v for k, v in resources.items() if k not in ("cloud", "region", "zone")}
        resources["infra"] = overrides.infra
    for key in ("cloud", "region", "zone", "instance_type", "cpus", "memory", "use_spot",
                "disk_size", "disk_tier", "network_tier", "image_id", "ports"):
        value = getattr(overrides, key)
        if value is not None:
            resources[key] = value
    if overrides.gpus is not None:
        resources["accelerators"] = overrides.gpus
        resources.pop("any_of", None)
        resources.pop("ordered", None)
    data["resources"] = resources
    if overrides.num_nodes is not None:
        data["num_nodes"] = overrides.num_nodes
    if overrides.name is not None:
        data["name"] = overrides.name
    if overrides.workdir is not None:
        data["workdir"] = overrides.workdir
    data["envs"] = {**task.envs, **overrides.envs}
    data["secrets"] = {**task.secrets, **overrides.secrets}
    return parse_task(data, source, as_written=False)


def check_infra_flag(infra: str | None, **flags: str | None) -> None:
    """``--infra`` is well formed and agrees with ``--cloud``/``--region``/``--zone``
    (``flags``): checked before any file is read, so a mistake is blamed on the flag."""
    if infra is None:
        return
    try:
        location = parse_infra(infra)
    except ValueError as exc:
        raise SpecError("--infra", [("", str(exc))]) from None
    clash = conflicts(location, flags)
    if clash:
        given = " and ".join(f"--{field} {flags[field]}" for field in clash)
        raise SpecError("--infra", [("", f"--infra {infra} disagrees with {given}")])
