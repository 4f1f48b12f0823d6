"""Command-line flags that override a task's YAML (``orch launch --cloud aws task.yaml``),
applied by SkyPilot's rules: ``--infra`` replaces the whole place, ``--gpus`` the
accelerator choices, ``--env`` adds to (and wins over) the task's envs, ``--secret`` to
its secrets."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from orch.local_paths import DIRECTORY, path_kind
from orch.secret import Secret
from orch.spec import SpecError, Task, parse_task
from orch.spec_infra import conflicts, parse_infra
from orch.spec_values import MAX_NODES, number_or_plus, parse_accelerators


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
    for key in ("cloud", "region", "zone", "instance_type", "cpus", "memory", "use_spot"):
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


def check_resource_flags(*, cpus: str | None = None, memory: str | None = None,
                         gpus: str | None = None, num_nodes: int | None = None,
                         workdir: str | None = None) -> None:
    """``--cpus``, ``--memory``, ``--gpus``, ``--num-nodes`` and ``--workdir`` are well
    formed: checked before any file is read, so a mistake is blamed on the flag, not on
    the task YAML."""
    checks = (("--cpus", cpus, lambda v: number_or_plus(v, "cpus")),
              ("--memory", memory, lambda v: number_or_plus(v, "memory")),
              ("--gpus", gpus, parse_accelerators))
    for flag, value, check in checks:
        if value is None:
            continue
        try:
            check(value)
        except ValueError as exc:
            raise SpecError(flag, [("", str(exc))]) from None
    if num_nodes is not None and not 1 <= num_nodes <= MAX_NODES:
        raise SpecError("--num-nodes", [("", f"expected 1 to {MAX_NODES}, got {num_nodes}")])
    if workdir is not None and path_kind(os.path.expanduser(workdir)) != DIRECTORY:
        raise SpecError("--workdir", [("", f"{workdir} is not a directory on this machine")])
