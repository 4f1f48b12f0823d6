"""Command-line flags that override a task's YAML (``orch launch --cloud aws task.yaml``),
applied by SkyPilot's rules: ``--infra`` replaces the whole place, ``--gpus`` the
accelerator choices, ``--env`` adds to (and wins over) the task's envs, ``--secret`` to
its secrets."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orch.local_paths import DIRECTORY, path_kind
from orch.secret import Secret
from orch.spec import Resources, SpecError, Task, describe_error, parse_task
from orch.spec_infra import conflicts, parse_infra
from orch.spec_values import MAX_NODES


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


# The flags that set one resources field, checked by that field's own validator.
_FLAG_FIELDS = {"--cpus": "cpus", "--memory": "memory", "--gpus": "accelerators",
                "--disk-size": "disk_size", "--disk-tier": "disk_tier",
                "--network-tier": "network_tier", "--ports": "ports", "--image-id": "image_id"}


def check_resource_flags(values: Mapping[str, object], *, num_nodes: int | None = None,
                         workdir: str | None = None) -> None:
    """The flags of ``values`` (``{"--cpus": "4+", …}``, None: not given), ``--num-nodes``
    and ``--workdir`` are well formed: checked before any file is read, so a mistake is
    blamed on the flag, not on the task YAML."""
    for flag, value in values.items():
        if value is None:
            continue
        try:
            Resources.model_validate({_FLAG_FIELDS[flag]: value})
        except ValidationError as exc:
            _, message = describe_error(dict(exc.errors()[0]), lambda loc: [])
            raise SpecError(flag, [("", message)]) from None
    if num_nodes is not None and not 1 <= num_nodes <= MAX_NODES:
        raise SpecError("--num-nodes", [("", f"expected 1 to {MAX_NODES}, got {num_nodes}")])
    if workdir is not None and path_kind(os.path.expanduser(workdir)) != DIRECTORY:
        raise SpecError("--workdir", [("", f"{workdir} is not a directory on this machine")])
