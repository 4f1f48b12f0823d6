"""The task spec: SkyPilot's task YAML as pydantic models.

A YAML file holds one task, or a pipeline: several documents, the first of which may
hold only ``name`` (the pipeline's name). Loading validates everything a launch needs
(fields, types, paths on this machine) so that nothing is provisioned for a spec that
would fail later. Every problem is reported as a :class:`SpecError` naming the file and
the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orch.clouds.tiers import DiskTier, NetworkTier
from orch.lifecycle import Autostop
from orch.secret import Secret
from orch.spec_envs import given_over, still_required, substitute, variables_as_written
from orch.spec_envs import parse_env_file as parse_env_file  # re-exported for the CLI
from orch.spec_envs import parse_env_flags as parse_env_flags
from orch.spec_errors import SpecError
from orch.spec_infra import conflicts, parse_infra
from orch.spec_labels import RULES as LABEL_RULES
from orch.spec_labels import label_problem, parse_labels
from orch.spec_resource_fields import (
    autostop_setting,
    disk_size_gb,
    image_ids,
    max_hourly_cost,
    memory_with_units,
)
from orch.spec_unsupported import (
    FILE_MOUNTS_STORAGE,
    IMAGE_DOCKER,
    UNSUPPORTED,
    WORKDIR_GIT,
    is_bucket_uri,
    refused_field,
)
from orch.spec_values import number_or_plus
from orch.spec_values import parse_accelerators as parse_accelerators
from orch.suggest import suggest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecoveryStrategy(StrEnum):
    FAILOVER = "FAILOVER"
    EAGER_NEXT_REGION = "EAGER_NEXT_REGION"


class JobRecovery(_Strict):
    strategy: RecoveryStrategy = RecoveryStrategy.EAGER_NEXT_REGION
    max_restarts_on_errors: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _string_form(cls, value: Any) -> Any:
        # SkyPilot accepts `job_recovery: failover` as well as the mapping form; `none`
        # (its docs' example) and a null strategy mean the default strategy.
        if isinstance(value, str):
            value = {"strategy": value}
        if isinstance(value, dict) and "strategy" in value:
            strategy = value["strategy"]
            rest = {k: v for k, v in value.items() if k != "strategy"}
            if strategy is None or (isinstance(strategy, str) and strategy.upper() == "NONE"):
                return rest
            if isinstance(strategy, str):
                return {**rest, "strategy": strategy.upper()}
        return value


class Resources(_Strict):
    """One set of resource requirements; ``any_of`` / ``ordered`` list alternatives."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    # Input only: another way of writing cloud/region/zone (see _infra_location).
    infra: None = Field(default=None, exclude=True)
    instance_type: str | None = None
    cpus: str | None = None
    memory: str | None = None
    accelerators: dict[str, int] | None = None
    use_spot: bool = False
    disk_size: int = Field(default=256, ge=1)
    disk_tier: DiskTier | None = None  # None: the cloud's default, SkyPilot's medium
    network_tier: NetworkTier | None = None
    ports: list[str] = Field(default_factory=list)
    image_id: str | dict[str, str] | None = None  # a mapping: region → image
    labels: dict[str, str] = Field(default_factory=dict)
    max_hourly_cost: float | None = None  # US dollars per node and hour
    autostop: Autostop | None = None
    job_recovery: JobRecovery | None = None
    any_of: list[Resources] | None = None
    ordered: list[Resources] | None = None

    @model_validator(mode="before")
    @classmethod
    def _infra_location(cls, data: Any) -> Any:
        """``infra`` fills the cloud/region/zone not given beside it (a wildcard or a
        missing part as None, so an ``any_of`` entry's ``infra`` replaces the place it
        would inherit); the ``infra`` field's validator reports a malformed one."""
        if not isinstance(data, dict) or data.get("infra") is None:
            return data
        try:
            location = parse_infra(data["infra"])
        except ValueError:
            return data
        filled = {k: v for k, v in location.parts().items() if data.get(k) is None}
        return {**data, **filled}

    @model_validator(mode="before")
    @classmethod
    def _expand_accelerator_choices(cls, data: Any) -> Any:
        """A list of accelerators is an ordered preference, a set (YAML ``{A, B}``) any of."""
        if not isinstance(data, dict) or "accelerators" not in data:
            return data
        raw = data["accelerators"]
        try:
            parsed = None if isinstance(raw, list) else parse_accelerators(raw)
            choices = [parse_accelerators(item) for item in raw] if isinstance(raw, list) else []
        except ValueError:
            return data  # the field's own validator reports it, with its location
        if isinstance(raw, list):
            key = "ordered"
        else:
            if parsed is None or len(parsed) <= 1:
                single = {k: (v or 1) for k, v in (parsed or {}).items()} or None
                return {**data, "accelerators": single}
            choices = [{name: count or 1} for name, count in parsed.items()]
            key = "any_of"
        base = {k: v for k, v in data.items() if k != "accelerators"}
        entries = base.get("any_of") or base.get("ordered")
        if isinstance(entries, list):
            return _cross_product(base, entries, choices, key)
        alternatives = [{**base, "accelerators": choice} for choice in choices]
        return {**base, key: alternatives}

    @field_validator("accelerators", mode="before")
    @classmethod
    def _accelerators(cls, value: Any) -> dict[str, int | None] | None:
        if isinstance(value, list):
            raise ValueError("a list of accelerators is only allowed at the top of resources")
        return parse_accelerators(value)

    @field_validator("cloud")
    @classmethod
    def _cloud_lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value

    @field_validator("infra", mode="before")
    @classmethod
    def _infra(cls, value: Any, info: ValidationInfo) -> None:
        """Checks ``infra`` (already copied into cloud/region/zone) and keeps None, so a
        task equals the same task written with cloud/region/zone."""
        if value is None:
            return None
        clash = conflicts(parse_infra(value), info.data)
        if clash:
            given = " and ".join(f"{field} {info.data[field]!r}" for field in clash)
            raise ValueError(f"infra {value!r} disagrees with {given}; say where once, in "
                             "infra or in cloud/region/zone")
        return None

    @field_validator("image_id", mode="before")
    @classmethod
    def _image_id(cls, value: Any) -> Any:
        images = value.values() if isinstance(value, dict) else [value]
        if any(isinstance(i, str) and i.strip().lower().startswith("docker:") for i in images):
            raise ValueError(UNSUPPORTED[IMAGE_DOCKER])
        return image_ids(value)

    # The field parsers of spec_resource_fields / spec_labels, one line each.
    _disk_size = field_validator("disk_size", mode="before")(
        lambda v: disk_size_gb(v) if v is not None else 256)
    _labels = field_validator("labels", mode="before")(parse_labels)
    _max_hourly_cost = field_validator("max_hourly_cost", mode="before")(
        lambda v: None if v is None else max_hourly_cost(v))
    _autostop = field_validator("autostop", mode="before")(autostop_setting)

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> str | None:
        return number_or_plus(value, "cpus")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return number_or_plus(memory_with_units(value), "memory")

    @field_validator("ports", mode="before")
    @classmethod
    def _ports(cls, value: Any) -> list[str]:
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        ports = []
        for item in items:
            text = str(item).strip()
            if not re.fullmatch(r"\d{1,5}(-\d{1,5})?", text):
                raise ValueError(f"expected a port or a range like 8000-8010, got {item!r}")
            ports.append(text)
        return ports

    @model_validator(mode="after")
    def _alternatives_are_exclusive(self) -> Resources:
        if self.any_of and self.ordered:
            raise ValueError("use either any_of or ordered, not both")
        return self

    def alternatives(self) -> list[Resources]:
        """The concrete choices: each ``any_of``/``ordered`` entry inherits unset fields; a
        per-region ``image_id`` makes one choice per region it names (SkyPilot: failover
        goes only through those regions)."""
        options = self.any_of or self.ordered
        if not options:
            return self._per_image_region()
        base = self.model_dump(exclude={"any_of", "ordered"}, exclude_unset=True)
        merged = [Resources.model_validate({**base, **o.model_dump(exclude_unset=True)})
                  for o in options]
        return [choice for option in merged for choice in option._per_image_region()]

    def _per_image_region(self) -> list[Resources]:
        if not isinstance(self.image_id, dict):
            return [self]
        if self.region is not None:
            image = self.image_id.get(self.region)
            if image is None:
                raise ValueError(f"image_id names no image for region {self.region!r} "
                                 f"(it has {', '.join(self.image_id)})")
            return [self.model_copy(update={"image_id": image})]
        return [self.model_copy(update={"region": region, "image_id": image})
                for region, image in self.image_id.items()]

    @property
    def is_ordered(self) -> bool:
        return bool(self.ordered)

    def min_cpus(self) -> float:
        return float(self.cpus.rstrip("+")) if self.cpus else 0.0

    def min_memory_gb(self, vcpus: float | None = None) -> float:
        """The GiB asked for; a ratio (``8x``) is per vCPU of ``vcpus`` (default: the
        cpus asked for)."""
        if not self.memory:
            return 0.0
        if self.memory.endswith("x"):
            return float(self.memory[:-1]) * (self.min_cpus() if vcpus is None else vcpus)
        return float(self.memory.rstrip("+"))


def _cross_product(base: dict[str, Any], entries: list[Any], choices: list[Any],
                   accelerators_kind: str) -> dict[str, Any]:
    """Accelerator choices beside ``any_of``/``ordered`` entries: every entry with every
    accelerator (an entry naming its own accelerators keeps them), as SkyPilot does. The
    result is ordered only when both lists are (entry by entry, accelerators in order);
    any set in the mix makes it ``any_of``."""
    outer = "ordered" if base.get("ordered") else "any_of"
    kind = "ordered" if outer == "ordered" and accelerators_kind == "ordered" else "any_of"
    product = []
    for entry in entries:
        if isinstance(entry, dict) and "accelerators" in entry:
            product.append(entry)
            continue
        product += [{**(entry if isinstance(entry, dict) else {}), "accelerators": choice}
                    for choice in choices]
    rest = {k: v for k, v in base.items() if k not in ("any_of", "ordered")}
    return {**rest, kind: product}


class Task(_Strict):
    """One task: SkyPilot's task YAML fields. Paths are absolute after loading."""

    name: str | None = None
    workdir: str | None = None
    num_nodes: int = Field(default=1, ge=1)
    resources: Resources = Field(default_factory=Resources)
    envs: dict[str, str] = Field(default_factory=dict)
    # Given to setup and run like envs (winning over an env of the same name), shown as
    # <redacted> everywhere else: see orch.secret.
    secrets: dict[str, Secret] = Field(default_factory=dict)
    file_mounts: dict[str, str] = Field(default_factory=dict)
    setup: str | None = None
    run: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            raise ValueError("expected letters, digits, '.', '_' or '-' (at most 63)")
        return value

    @field_validator("workdir", mode="before")
    @classmethod
    def _workdir(cls, value: Any) -> Any:
        if isinstance(value, dict):
            raise ValueError(UNSUPPORTED[WORKDIR_GIT])
        return value

    @field_validator("envs", mode="before")
    @classmethod
    def _envs(cls, value: Any) -> dict[str, str]:
        """Values as strings; null stays as "" (SkyPilot's "required": see spec_envs)."""
        return variables_as_written(value, quote=True)

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> dict[str, Any]:
        """Like envs, but no message ever quotes a value."""
        return variables_as_written(value, quote=False)

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _file_mounts(cls, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of REMOTE_PATH: LOCAL_PATH")
        buckets = [str(remote) for remote, local in value.items()
                   if isinstance(local, dict) or (isinstance(local, str) and is_bucket_uri(local))]
        if buckets:
            raise ValueError(f"{', '.join(buckets)}: {UNSUPPORTED[FILE_MOUNTS_STORAGE]}")
        mounts = {}
        for remote, local in value.items():
            if not isinstance(local, str):
                raise ValueError(
                    f"{remote}: only local paths are supported as sources, got {local!r}"
                )
            mounts[str(remote)] = local
        return mounts


class Pipeline(_Strict):
    name: str | None = None
    tasks: list[Task]


TASK_FIELDS = sorted(Task.model_fields)
RESOURCES_FIELDS = sorted(Resources.model_fields)


def _task_fields_at(loc: list[str]) -> list[str]:
    """The field names allowed next to the last part of ``loc`` in a task."""
    parent = loc[-2] if len(loc) > 1 else ""
    return RESOURCES_FIELDS if parent in ("resources", "any_of", "ordered") or (
        len(loc) > 2 and loc[-3] in ("any_of", "ordered")
    ) else TASK_FIELDS if len(loc) == 1 else []


def _task_refused(loc: list[str]) -> str | None:
    """The message of a SkyPilot field orch refuses at ``loc`` (see spec_unsupported)."""
    return refused_field(loc, in_resources=_task_fields_at(loc) is RESOURCES_FIELDS)


def describe_error(error: dict[str, Any], fields_at: Callable[[list[str]], list[str]],
                   refused: Callable[[list[str]], str | None] | None = None
                   ) -> tuple[str, str]:
    """One pydantic error as (field path, message); an unknown field gets the close
    matches among ``fields_at(location)``, unless ``refused`` names it as a field of
    another tool that is refused on purpose (then its message, and no hint)."""
    loc = [str(part) for part in error["loc"]]
    # pydantic adds validator names ("function-before[...]") to locations; drop them.
    loc = [p for p in loc if not p.startswith(("function-", "constrained-"))]
    field = ".".join(loc)
    if error["type"] == "extra_forbidden":
        why = refused(loc) if refused else None
        return field, why or "unknown field" + suggest(loc[-1], fields_at(loc))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "assertion_error") and "input" in error:
        message += f" (got {error['input']!r})"
    return field, message


def _choice_problems(resources: Resources) -> list[tuple[str, str]]:
    """Checks that need the resources' final choices: per-region images, and labels
    against each cloud a choice may land on (orch.spec_labels)."""
    try:
        choices = resources.alternatives()
    except ValueError as exc:
        return [("resources.image_id", str(exc))]
    for choice in choices:
        problem = label_problem(choice.labels, [choice.cloud] if choice.cloud
                                else sorted(LABEL_RULES))
        if problem:
            where = "" if choice.cloud else " (with no cloud named, it may land there)"
            return [("resources.labels", problem + where)]
    return []


def _resolve_path(path: str, base: Path) -> Path:
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else (base / expanded)


def _check_paths(task: Task, base: Path) -> tuple[Task, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    update: dict[str, Any] = {}
    if task.workdir:
        workdir = _resolve_path(task.workdir, base)
        if not workdir.is_dir():
            problems.append(("workdir", f"{workdir} is not a directory on this machine"))
        update["workdir"] = str(workdir.resolve())
    mounts = {}
    for remote, local in task.file_mounts.items():
        source = _resolve_path(local, base)
        if not source.exists():
            problems.append((f"file_mounts.{remote}", f"{source} does not exist"))
        mounts[remote] = str(source.resolve())
    update["file_mounts"] = mounts
    return task.model_copy(update=update), problems


def _substituted(task: Task) -> Task:
    """``${NAME}``/``$NAME`` of the task's envs filled into workdir and file_mounts."""
    envs = task.envs
    mounts = {substitute(k, envs): substitute(v, envs) for k, v in task.file_mounts.items()}
    workdir = substitute(task.workdir, envs) if task.workdir else task.workdir
    return task.model_copy(update={"file_mounts": mounts, "workdir": workdir})


def parse_task(data: Any, source: str, base: Path | None = None, prefix: str = "", *,
               envs: Mapping[str, str] | None = None,
               secrets: Mapping[str, object] | None = None, as_written: bool = True) -> Task:
    """Validate one task mapping; relative paths resolve against ``base`` (default: cwd).
    ``envs`` and ``secrets`` (the command line's) override the task's before anything
    reads them. A task ``as_written`` by the user gets SkyPilot's env rules (spec_envs): a
    required env or secret still empty is refused, ``$VAR`` in paths is filled (from envs
    only); a task loaded before has had them."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(source, [(prefix.rstrip("."), "expected a mapping of task fields")])
    data, written = given_over(data, "envs", envs)
    data, written_secrets = given_over(data, "secrets", secrets)
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        problems = [describe_error(dict(e), _task_fields_at, _task_refused)
                    for e in exc.errors()]
        located = [(prefix + f if f else prefix.rstrip("."), m) for f, m in problems]
        raise SpecError(source, located) from None
    choice_problems = _choice_problems(task.resources)
    if choice_problems:
        raise SpecError(source, [(prefix + f, m) for f, m in choice_problems])
    if as_written:
        missing = still_required(task.envs, task.secrets, written, written_secrets, prefix)
        if missing:
            raise SpecError(source, missing)
        task = _substituted(task)
    task, problems = _check_paths(task, base or Path.cwd())
    if problems:
        raise SpecError(source, [(prefix + f, m) for f, m in problems])
    return task


def load_pipeline(path: str | Path, envs: Mapping[str, str] | None = None,
                  secrets: Mapping[str, object] | None = None) -> Pipeline:
    """Load a task or pipeline YAML file. Relative paths resolve against the cwd, as in
    SkyPilot; ``envs`` and ``secrets`` (from the command line) override every task's."""
    source = str(path)
    file = Path(path)
    if not file.is_file():
        raise SpecError(source, [("", "no such file")])
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise SpecError(source, [("", f"not valid YAML: {exc}")]) from None
    if not documents:
        raise SpecError(source, [("", "the file holds no task")])
    name = None
    first = documents[0]
    if len(documents) > 1 and isinstance(first, dict) and set(first) == {"name"}:
        name = str(first["name"])
        documents = documents[1:]
    many = len(documents) > 1
    tasks = [
        parse_task(doc, source, prefix=f"task[{i}]." if many else "", envs=envs,
                   secrets=secrets)
        for i, doc in enumerate(documents)
    ]
    return Pipeline(name=name or tasks[0].name, tasks=tasks)


def load_task(path: str | Path) -> Task:
    pipeline = load_pipeline(path)
    if len(pipeline.tasks) != 1:
        raise SpecError(str(path), [("", f"expected one task, found {len(pipeline.tasks)}")])
    return pipeline.tasks[0]


def looks_like_yaml(entrypoint: str) -> bool:
    return entrypoint.endswith((".yaml", ".yml")) or (
        Path(entrypoint).is_file() and " " not in entrypoint
    )
