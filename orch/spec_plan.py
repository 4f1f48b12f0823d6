"""Planning a task whose mistakes only the catalog can see, reported like every other mistake.

An unknown region, zone, instance type or accelerator, or an instance type that lacks the
accelerator asked for, is found by the optimizer, whose messages say what is wrong but not
where it was written. :func:`checked_plan` plans and, when the optimizer refuses, turns its
message into a :class:`SpecError` naming the file and the field path
(``task[1].resources.any_of[0].region``), or the flag when a flag gave that value. The
optimizer stays unaware of files and fields; this module only reads its messages' subject.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from orch.optimizer import Candidate, OptimizerError, UnknownResourceError, plan
from orch.spec import Task
from orch.spec_errors import SpecError
from orch.spec_overrides import Overrides

# The field an optimizer message is about, by its first words; "No resources satisfy …"
# is about the combination of fields, so it names the resources as a whole.
_SUBJECTS = (
    ("unknown cloud", "cloud"), ("cloud ", "cloud"), ("no cloud ", "cloud"),
    ("unknown region", "region"), ("unknown zone", "zone"), ("zone ", "zone"),
    ("unknown instance type", "instance_type"), ("instance type", "instance_type"),
    ("the local cloud has no instance types", "instance_type"),
    ("unknown accelerator", "accelerators"), ("one accelerator type", "accelerators"),
)
_FLAGS = {"cloud": "--cloud", "region": "--region", "zone": "--zone",
          "instance_type": "--instance-type", "accelerators": "--gpus"}


def checked_plan(task: Task, source: str, *, flags: Overrides | None = None,
                 written: Task | None = None, prefix: str = "",
                 **plan_args: Any) -> list[Candidate]:
    """``plan(task, **plan_args)``, or a SpecError naming where the refused value was
    written: ``source`` and ``prefix`` + field path, or the flag of ``flags`` that gave it.
    ``written``: the task before the flags, whose ``infra`` the fields of ``task`` lose."""
    try:
        return plan(task, **plan_args)
    except OptimizerError as err:
        where, field = _locate(task, err, plan_args)
        flag = _flag_of(field, flags)
        if flag:
            raise SpecError(flag, [("", str(err))]) from None
        field = _as_written(written, where, field)
        path = ".".join(p for p in (where, field) if p)
        raise SpecError(source, [(prefix + path, str(err))]) from None


def check_plannable(tasks: Iterable[Task], source: str, *, flags: Overrides | None = None,
                    **plan_args: Any) -> None:
    """Every task of a pipeline plans (``task[i].`` prefixes when there are several)."""
    listed = list(tasks)
    for i, task in enumerate(listed):
        checked_plan(task, source, flags=flags, prefix=f"task[{i}]." if len(listed) > 1 else "",
                     **plan_args)


def _locate(task: Task, err: OptimizerError, plan_args: Mapping[str, Any]) -> tuple[str, str]:
    """(the resources the message is about, the field): an unknown name is looked for in
    each ``any_of``/``ordered`` entry; "nothing fits any alternative" is about them all."""
    field = _subject(str(err))
    resources = task.resources
    key = "any_of" if resources.any_of else "ordered" if resources.ordered else None
    options = resources.any_of or resources.ordered or []
    if key is None or not isinstance(err, UnknownResourceError):
        return ("resources", field) if key is None or field else (f"resources.{key}", "")
    for i, alternative in enumerate(resources.alternatives()):
        try:
            plan(task.model_copy(update={"resources": alternative}), **plan_args)
        except UnknownResourceError as again:
            if str(again) == str(err):
                written_here = field in options[i].model_fields_set or not field
                return (f"resources.{key}[{i}]" if written_here else "resources"), field
        except OptimizerError:
            continue
    return "resources", field


def _as_written(written: Task | None, where: str, field: str) -> str:
    """``infra`` when the cloud/region/zone at ``where`` was written as ``infra``."""
    match = re.fullmatch(r"resources(?:\.(any_of|ordered)\[(\d+)\])?", where)
    if written is None or field not in ("cloud", "region", "zone") or match is None:
        return field
    resources = written.resources
    if match.group(1):
        options = getattr(resources, match.group(1)) or []
        index = int(match.group(2))
        if index >= len(options):
            return field
        resources = options[index]
    return "infra" if "infra" in resources.model_fields_set else field


def _subject(message: str) -> str:
    text = message.lower()
    return next((field for words, field in _SUBJECTS if text.startswith(words)), "")


def _flag_of(field: str, flags: Overrides | None) -> str | None:
    if flags is None or not field:
        return None
    if flags.infra is not None and field in ("cloud", "region", "zone"):
        return "--infra"
    given = flags.gpus if field == "accelerators" else getattr(flags, field, None)
    return _FLAGS[field] if given is not None else None

