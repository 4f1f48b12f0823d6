"""A task's environment variables (and secrets, which follow the same rules), by
SkyPilot's rules.

* ``envs: {NAME: null}`` (or an empty value) means *required*: the launch is refused,
  naming the variable, unless the command line gives it.
* The command line gives values with ``--env NAME=VALUE`` (or ``--env NAME``: this
  process's value) and ``--env-file PATH``; ``--env`` wins over the file, the file over
  the YAML (SkyPilot's precedence).
* ``${NAME}`` and ``$NAME`` in ``file_mounts`` (both sides) and ``workdir`` are replaced by
  the task's values when the YAML is loaded; a name the task does not define is left as
  written (so ``$HOME`` stays for the shell, as in SkyPilot).

The env file is read here rather than with python-dotenv: that package is only in the
test environment (a dependency of moto's server), not in what orch installs. The format is
the common subset of dotenv files: ``NAME=VALUE`` lines, optionally after ``export``;
blank lines and ``#`` comments; a value in single quotes is literal, in double quotes
``\\n``, ``\\t``, ``\\"`` and ``\\\\`` are unescaped; an unquoted value ends at `` #``.
Values spanning several lines are refused, naming the line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from orch.spec_errors import SpecError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$"}


def is_env_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def required_envs(written: Mapping[object, object]) -> list[str]:
    """The names a task's ``envs`` (as written) leave null or empty: SkyPilot's mark for
    "must be given on the command line"."""
    return [str(name) for name, value in written.items() if value is None or value == ""]


def variables_as_written(value: Any, quote: bool) -> dict[str, Any]:
    """``envs`` or ``secrets`` as written: checked names, values as strings (a null as "",
    SkyPilot's "required"), a secret already validated kept; ``quote`` a bad value in the
    message or not."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of NAME: value")
    variables: dict[str, Any] = {}
    for key, item in value.items():
        if not is_env_name(str(key)):
            raise ValueError(f"{key!r} is not a valid environment variable name")
        if isinstance(item, dict | list):
            raise ValueError(f"{key}: expected a string or a number"
                             + (f", got {item!r}" if quote else ""))
        variables[str(key)] = item if isinstance(item, SecretStr) else (
            "" if item is None else str(item))
    return variables


def given_over(data: dict[str, Any], field: str, values: Mapping[str, object] | None
               ) -> tuple[dict[str, Any], Mapping[object, object]]:
    """``data`` with the command line's ``values`` over its ``field`` (envs or secrets),
    and that field as written (to find the required names)."""
    written = data[field] if isinstance(data.get(field), dict) else {}
    if values and isinstance(data.get(field) or {}, dict):
        data = {**data, field: {**(data.get(field) or {}), **values}}
    return data, written


def still_required(envs: Mapping[str, str], secrets: Mapping[str, SecretStr],
                   written_envs: Mapping[object, object], written_secrets: Mapping[object, object],
                   prefix: str) -> list[tuple[str, str]]:
    """The required envs and secrets (null or empty in the task) still without a value."""
    missing = [(f"{prefix}envs.{name}", f"required (null or empty in the task): give it "
                f"with --env {name}=VALUE or --env-file")
               for name in required_envs(written_envs) if envs.get(name, "") == ""]
    return missing + [
        (f"{prefix}secrets.{name}", f"required (null or empty in the task): give it with "
         f"--secret {name}=VALUE, or --secret {name} to take it from your environment")
        for name in required_envs(written_secrets)
        if name not in secrets or not secrets[name].get_secret_value()]


def substitute(text: str, envs: Mapping[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` → the task's value; names it does not define stay."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return envs.get(name, match.group(0))

    return _REFERENCE.sub(value, text)


def parse_env_flags(values: list[str], source: str = "--env") -> dict[str, str]:
    """``K=V`` pairs; a bare ``K`` takes its value from this process's environment. A
    message quotes the flag's value, except for ``--secret`` (only its name)."""
    envs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not is_env_name(key):
            shown = repr(item) if source != "--secret" else repr(key + sep + "…" * bool(sep))
            raise SpecError(source, [("", f"{shown}: expected NAME=VALUE or NAME, with a "
                                          "NAME of letters, digits and '_'")])
        if not sep:
            if key not in os.environ:
                raise SpecError(source, [(key, "not set in the environment; use K=V")])
            value = os.environ[key]
        envs[key] = value
    return envs


def parse_env_file(path: str | Path, source: str = "--env-file") -> dict[str, str]:
    """The variables of a dotenv file (the format is in the module docstring)."""
    file = Path(path)
    where = f"{source} {path}"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (
            "does not exist" if not file.exists() else
            "is a directory" if file.is_dir() else exc.strerror or str(exc))
        raise SpecError(where, [("", f"{path} {reason}")]) from None
    envs: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        value = _value(match.group(2)) if match else None
        if match is None or value is None:
            problems.append((f"line {number}", "expected NAME=VALUE (a value in quotes must "
                                               "end on the same line)"))
            continue
        envs[match.group(1)] = value
    if problems:
        raise SpecError(where, problems)
    return envs


def _value(raw: str) -> str | None:
    """One value as written after ``=``; None when a quote is left open."""
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        end = _closing_quote(raw, quote)
        if end is None or raw[end + 1:].strip()[:1] not in ("", "#"):
            return None
        inner = raw[1:end]
        if quote == "'":
            return inner
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), inner)
    return re.split(r"\s+#", raw, maxsplit=1)[0].strip()


def _closing_quote(raw: str, quote: str) -> int | None:
    index = 1
    while index < len(raw):
        if raw[index] == "\\" and quote == '"':
            index += 2
            continue
        if raw[index] == quote:
            return index
        index += 1
    return None
