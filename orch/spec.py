"""The task spec: SkyPilot's task YAML as pydantic models.

A YAML file holds one task, or a pipeline: several documents, the first of which may
hold only ``name`` (the pipeline's name). Loading validates everything a launch needs
(fields, types, paths on this machine) so that nothing is provisioned for a spec that
would fail later. Every problem is reported as a :class:`SpecError` naming the file and
the field.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_NUMBER_OR_PLUS = re.compile(r"^\s*(\d+(\.\d+)?)\s*(\+?)\s*$")


class SpecError(Exception):
    """A task spec that cannot be used; ``problems`` pairs a field path with what is wrong.
    Subclasses name other user files (``what``) and share the CLI's exit code 2."""

    what = "task spec"

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid {self.what}"]
        lines += [f"  {field}: {message}" if field else f"  {message}" for field, message in
                  problems]
        super().__init__("\n".join(lines))


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
        # SkyPilot accepts `job_recovery: failover` as well as the mapping form.
        if isinstance(value, str):
            return {"strategy": value.upper()}
        if isinstance(value, dict) and isinstance(value.get("strategy"), str):
            return {**value, "strategy": value["strategy"].upper()}
        return value


def _number_or_plus(value: Any, what: str) -> str | None:
    """Normalise ``4``, ``"4"``, ``"4+"``, ``"16GB"`` into ``"4"`` / ``"4+"``."""
    if value is None:
        return None
    text = str(value).strip()
    if what == "memory":
        text = re.sub(r"(?i)\s*gb?(\+?)$", r"\1", text)
    match = _NUMBER_OR_PLUS.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a positive number, optionally followed by '+', got {value!r}")
    number = match.group(1)
    if number.endswith(".0"):
        number = number[:-2]
    return number + match.group(3)


def parse_accelerators(value: Any) -> dict[str, int | None] | None:
    """``"A100:8"`` → ``{"A100": 8}``; a mapping is kept (``None`` counts mean "any of")."""
    if value is None:
        return None
    if isinstance(value, str):
        name, _, count = value.partition(":")
        if not name.strip():
            raise ValueError(f"expected NAME or NAME:COUNT, got {value!r}")
        try:
            number = int(float(count)) if count else 1
        except ValueError:
            raise ValueError(f"expected NAME:COUNT with a whole count, got {value!r}") from None
        return {name.strip(): number}
    if isinstance(value, dict):
        parsed: dict[str, int | None] = {}
        for name, count in value.items():
            if count is None:  # YAML's set form {A100:8, H100:8}: counts inside the names
                parsed.update(parse_accelerators(str(name)) or {})
                continue
            if not isinstance(count, int | float) or count <= 0:
                raise ValueError(f"count of {name!r} must be a positive number, got {count!r}")
            parsed[str(name)] = int(count)
        return parsed
    raise ValueError(f"expected NAME, NAME:COUNT, a mapping or a list, got {value!r}")


class Resources(_Strict):
    """One set of resource requirements; ``any_of`` / ``ordered`` list alternatives."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    cpus: str | None = None
    memory: str | None = None
    accelerators: dict[str, int] | None = None
    use_spot: bool = False
    disk_size: int = Field(default=256, ge=1)
    ports: list[str] = Field(default_factory=list)
    image_id: str | None = None
    job_recovery: JobRecovery | None = None
    any_of: list[Resources] | None = None
    ordered: list[Resources] | None = None

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
        if data.get("any_of") or data.get("ordered"):
            raise ValueError("a list or set of accelerators cannot be combined with any_of/ordered")
        base = {k: v for k, v in data.items() if k != "accelerators"}
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

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> str | None:
        return _number_or_plus(value, "cpus")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return _number_or_plus(value, "memory")

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
        """The concrete choices: each ``any_of``/``ordered`` entry inherits unset fields."""
        options = self.any_of or self.ordered
        if not options:
            return [self]
        base = self.model_dump(exclude={"any_of", "ordered"}, exclude_unset=True)
        return [
            Resources.model_validate({**base, **o.model_dump(exclude_unset=True)}) for o in options
        ]

    @property
    def is_ordered(self) -> bool:
        return bool(self.ordered)

    def min_cpus(self) -> float:
        return float(self.cpus.rstrip("+")) if self.cpus else 0.0

    def min_memory_gb(self) -> float:
        return float(self.memory.rstrip("+")) if self.memory else 0.0


class Task(_Strict):
    """One task: SkyPilot's task YAML fields. Paths are absolute after loading."""

    name: str | None = None
    workdir: str | None = None
    num_nodes: int = Field(default=1, ge=1)
    resources: Resources = Field(default_factory=Resources)
    envs: dict[str, str] = Field(default_factory=dict)
    file_mounts: dict[str, str] = Field(default_factory=dict)
    setup: str | None = None
    run: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            raise ValueError("expected letters, digits, '.', '_' or '-' (at most 63)")
        return value

    @field_validator("envs", mode="before")
    @classmethod
    def _envs(cls, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of NAME: value")
        envs = {}
        for key, item in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            envs[str(key)] = "" if item is None else str(item)
        return envs

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _file_mounts(cls, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("expected a mapping of REMOTE_PATH: LOCAL_PATH")
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


def suggest(word: str, options: list[str]) -> str:
    """"; did you mean 'x'?" for the close matches of ``word`` (or "")."""
    close = difflib.get_close_matches(word, options, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _task_fields_at(loc: list[str]) -> list[str]:
    """The field names allowed next to the last part of ``loc`` in a task."""
    parent = loc[-2] if len(loc) > 1 else ""
    return RESOURCES_FIELDS if parent in ("resources", "any_of", "ordered") or (
        len(loc) > 2 and loc[-3] in ("any_of", "ordered")
    ) else TASK_FIELDS if len(loc) == 1 else []


def describe_error(error: dict[str, Any],
                   fields_at: Callable[[list[str]], list[str]]) -> tuple[str, str]:
    """One pydantic error as (field path, message); an unknown field gets the close
    matches among ``fields_at(location)``."""
    loc = [str(part) for part in error["loc"]]
    # pydantic adds validator names ("function-before[...]") to locations; drop them.
    loc = [p for p in loc if not p.startswith(("function-", "constrained-"))]
    field = ".".join(loc)
    if error["type"] == "extra_forbidden":
        return field, "unknown field" + suggest(loc[-1], fields_at(loc))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "assertion_error") and "input" in error:
        message += f" (got {error['input']!r})"
    return field, message


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


def parse_task(data: Any, source: str, base: Path | None = None, prefix: str = "") -> Task:
    """Validate one task mapping; relative paths resolve against ``base`` (default: cwd)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(source, [(prefix.rstrip("."), "expected a mapping of task fields")])
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        problems = [describe_error(dict(e), _task_fields_at) for e in exc.errors()]
        located = [(prefix + f if f else prefix.rstrip("."), m) for f, m in problems]
        raise SpecError(source, located) from None
    task, problems = _check_paths(task, base or Path.cwd())
    if problems:
        raise SpecError(source, [(prefix + f, m) for f, m in problems])
    return task


def load_pipeline(path: str | Path) -> Pipeline:
    """Load a task or pipeline YAML file. Relative paths resolve against the cwd, as in
    SkyPilot."""
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
        parse_task(doc, source, prefix=f"task[{i}]." if many else "")
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


class Overrides(_Strict):
    """Command-line flags that override a task's YAML (``None`` = not given)."""

    name: str | None = None
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
    workdir: str | None = None


def apply_overrides(task: Task, overrides: Overrides, source: str = "command line") -> Task:
    """Return ``task`` with the flags applied, validated again as a whole."""
    data = task.model_dump(exclude_unset=True)
    resources = dict(data.get("resources", {}))
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
    return parse_task(data, source)


def parse_env_flags(values: list[str], source: str = "--env") -> dict[str, str]:
    """``K=V`` pairs; a bare ``K`` takes its value from this process's environment."""
    envs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            if key not in os.environ:
                raise SpecError(source, [(key, "not set in the environment; use K=V")])
            value = os.environ[key]
        envs[key] = value
    return envs
