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
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orch.clouds import CLOUDS
from orch.contracts.staging import StagedFiles
from orch.local_paths import DIRECTORY, FILE, MISSING, path_kind, resolved
from orch.secret import Secret
from orch.spec_envs import given_over, still_required, substitute, variables_as_written
from orch.spec_envs import parse_env_file as parse_env_file  # re-exported for the CLI
from orch.spec_envs import parse_env_flags as parse_env_flags
from orch.spec_errors import SpecError, field_path, quoted, shorten
from orch.spec_resources import JobRecovery as JobRecovery  # re-exported
from orch.spec_resources import RecoveryStrategy as RecoveryStrategy
from orch.spec_resources import Resources, StrictModel, choice_problems
from orch.spec_storage import StorageMount, checked_paths, name_problems, split_file_mounts
from orch.spec_storage import substituted as substituted_mounts
from orch.spec_unsupported import UNSUPPORTED, WORKDIR_GIT, refused_field
from orch.spec_values import MAX_NODES
from orch.spec_values import parse_accelerators as parse_accelerators
from orch.spec_yaml import load_yaml_file, with_lines
from orch.suggest import suggest


class Task(StrictModel):
    """One task: SkyPilot's task YAML fields. Paths are absolute after loading."""

    name: str | None = None
    workdir: str | None = None
    num_nodes: int = Field(default=1, ge=1, le=MAX_NODES, strict=True)
    resources: Resources = Field(default_factory=Resources)
    envs: dict[str, str] = Field(default_factory=dict)
    # Given to setup and run like envs (winning over an env of the same name), shown as
    # <redacted> everywhere else: see orch.secret.
    secrets: dict[str, Secret] = Field(default_factory=dict)
    file_mounts: dict[str, str] = Field(default_factory=dict)  # remote path → local path
    # The bucket entries of file_mounts (URIs and mappings), by mount path: orch.spec_storage.
    storage_mounts: dict[str, StorageMount] = Field(default_factory=dict)
    # Where the client staged workdir and file_mounts for the workers (orch.staging); set
    # by the client after validation, never written by users.
    staged: StagedFiles | None = None
    setup: str | None = None
    run: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _buckets_apart(cls, data: Any) -> Any:
        return split_file_mounts(data)

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
            raise ValueError("expected a mapping of REMOTE_PATH: LOCAL_PATH, bucket URI or "
                             "storage mapping")
        mounts = {}
        for remote, local in value.items():
            if not isinstance(local, str):
                raise ValueError(
                    f"{remote}: expected a local path, a bucket URI or a mapping of name, "
                    f"source, store, mode and persistent; got {local!r}"
                )
            mounts[str(remote)] = local
        return mounts


class Pipeline(StrictModel):
    name: str | None = None
    tasks: list[Task]


# Fields orch fills in, never written by users (file_mounts holds buckets in the YAML).
ORCH_FIELDS = {"storage_mounts": "buckets are written in file_mounts",
               "staged": "orch stages workdir and file_mounts itself"}
TASK_FIELDS = sorted(set(Task.model_fields) - set(ORCH_FIELDS))
RESOURCES_FIELDS = sorted(Resources.model_fields)
STORAGE_FIELDS = sorted(StorageMount.model_fields)


def _task_fields_at(loc: list[str]) -> list[str]:
    """The field names allowed next to the last part of ``loc`` in a task."""
    parent = loc[-2] if len(loc) > 1 else ""
    if loc[0] == "storage_mounts":
        return STORAGE_FIELDS if len(loc) == 3 else []
    return RESOURCES_FIELDS if parent in ("resources", "any_of", "ordered") or (
        len(loc) > 2 and loc[-3] in ("any_of", "ordered")
    ) else TASK_FIELDS if len(loc) == 1 else []


def _as_written(field: str) -> str:
    """A field path as the YAML has it: buckets are written in file_mounts."""
    return "file_mounts" + field.removeprefix("storage_mounts") if field.startswith(
        "storage_mounts") else field


def _task_refused(loc: list[str]) -> str | None:
    """The message of a SkyPilot field orch refuses at ``loc`` (see spec_unsupported)."""
    return refused_field(loc, in_resources=_task_fields_at(loc) is RESOURCES_FIELDS)


# pydantic's wording for strict types, said the way a YAML author thinks of them.
_PLAIN = {"bool_type": "expected true or false", "int_type": "expected a whole number"}


def describe_error(error: dict[str, Any], fields_at: Callable[[list[str]], list[str]],
                   refused: Callable[[list[str]], str | None] | None = None
                   ) -> tuple[str, str]:
    """One pydantic error as (field path, message); an unknown field gets the close
    matches among ``fields_at(location)``, unless ``refused`` names it as a field of
    another tool that is refused on purpose (then its message, and no hint)."""
    # pydantic adds validator names ("function-before[...]") to locations; drop them.
    parts = [p for p in error["loc"]
             if not str(p).startswith(("function-", "constrained-"))]
    loc = [str(part) for part in parts]
    field = field_path(parts)
    if error["type"] == "extra_forbidden":
        why = refused(loc) if refused else None
        return field, why or "unknown field" + suggest(loc[-1], fields_at(loc))
    message = _PLAIN.get(error["type"]) or error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "assertion_error") and "input" in error:
        message += f" (got {quoted(error['input'])})"
    return field, message


def _resolve_path(path: str, base: Path) -> Path:
    expanded = Path(os.path.expanduser(path))
    return expanded if expanded.is_absolute() else (base / expanded)


def _check_paths(task: Task, base: Path) -> tuple[Task, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    update: dict[str, Any] = {}
    if task.workdir:
        workdir = _resolve_path(task.workdir, base)
        kind = path_kind(workdir)
        if kind != DIRECTORY:
            shown = shorten(str(workdir), 120)
            problems.append(("workdir", f"{shown} is {kind}" if kind.startswith("not a")
                             else f"{shown} is not a directory on this machine"))
        update["workdir"] = resolved(workdir)
    mounts = {}
    for remote, local in task.file_mounts.items():
        source = _resolve_path(local, base)
        kind = path_kind(source)
        if kind == MISSING or kind.startswith("not a"):
            problems.append((f"file_mounts.{remote}", f"{shorten(str(source), 120)} "
                             + ("does not exist" if kind == MISSING else f"is {kind}")))
        mounts[remote] = resolved(source)
    update["file_mounts"] = mounts
    update["storage_mounts"], bucket_problems = checked_paths(task.storage_mounts, base)
    return task.model_copy(update=update), problems + bucket_problems


def _substituted(task: Task) -> Task:
    """``${NAME}``/``$NAME`` of the task's envs filled into workdir and file_mounts."""
    envs = task.envs
    mounts = {substitute(k, envs): substitute(v, envs) for k, v in task.file_mounts.items()}
    workdir = substitute(task.workdir, envs) if task.workdir else task.workdir
    return task.model_copy(update={"file_mounts": mounts, "workdir": workdir,
                                   "storage_mounts": substituted_mounts(task.storage_mounts,
                                                                        envs)})


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
    for field, why in ORCH_FIELDS.items():
        if as_written and field in data:  # orch's own field, not the YAML's
            raise SpecError(source, [(prefix + field, f"unknown field; {why}")])
    data, written = given_over(data, "envs", envs)
    data, written_secrets = given_over(data, "secrets", secrets)
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        problems = [describe_error(dict(e), _task_fields_at, _task_refused)
                    for e in exc.errors()]
        located = [(prefix + _as_written(f) if f else prefix.rstrip("."), m)
                   for f, m in problems]
        raise SpecError(source, located) from None
    unlaunchable = choice_problems(task.resources)
    if unlaunchable:
        raise SpecError(source, [(prefix + f, m) for f, m in unlaunchable])
    if as_written:
        missing = still_required(task.envs, task.secrets, written, written_secrets, prefix)
        if missing:
            raise SpecError(source, missing)
        task = _substituted(task)
    task, problems = _check_paths(task, base or Path.cwd())
    if task.storage_mounts:
        problems += name_problems(task.storage_mounts, task.resources, CLOUDS)
    if problems:
        raise SpecError(source, [(prefix + f, m) for f, m in problems])
    return task


def load_pipeline(path: str | Path, envs: Mapping[str, str] | None = None,
                  secrets: Mapping[str, object] | None = None) -> Pipeline:
    """Load a task or pipeline YAML file. Relative paths resolve against the cwd, as in
    SkyPilot; ``envs`` and ``secrets`` (from the command line) override every task's."""
    source = str(path)
    documents = load_yaml_file(path, source)  # text and YAML checked: see spec_yaml
    if not documents:
        raise SpecError(source, [("", "the file holds no task")])
    name = None
    first = documents[0][0]
    if len(documents) > 1 and isinstance(first, dict) and set(first) == {"name"}:
        name = str(first["name"])
        documents = documents[1:]
    many = len(documents) > 1
    tasks = []
    for i, (doc, lines) in enumerate(documents):
        prefix = f"task[{i}]." if many else ""
        try:
            tasks.append(parse_task(doc, source, prefix=prefix, envs=envs, secrets=secrets))
        except SpecError as err:  # the same problems, each with the line it is on
            raise with_lines(err, lines, prefix) from None
    return Pipeline(name=name or tasks[0].name, tasks=tasks)


def load_task(path: str | Path) -> Task:
    pipeline = load_pipeline(path)
    if len(pipeline.tasks) != 1:
        raise SpecError(str(path), [("", f"expected one task, found {len(pipeline.tasks)}")])
    return pipeline.tasks[0]


def looks_like_yaml(entrypoint: str) -> bool:
    return entrypoint.endswith((".yaml", ".yml")) or (
        " " not in entrypoint and path_kind(entrypoint) == FILE
    )
