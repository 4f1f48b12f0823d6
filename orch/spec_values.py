"""The values inside ``resources`` that are strings with a grammar of their own:
``cpus``/``memory`` (``4``, ``4+``, ``16GB``, ``8x``), ``accelerators`` (``A100:8``) and
``ports`` (``8080``, ``9000-9010``), and the bounds of counts: a value beyond them is a
typo (an extra zero), not a request any cloud could serve.

Accelerator counts are whole numbers here. SkyPilot parses ``H100:0.5`` too, but a
fractional count only means something when sharing a GPU of an existing cluster (``sky
exec``); launching one finds no instance type, and orch schedules whole GPUs, so it is
refused with that reason rather than rounded.
"""

from __future__ import annotations

import re
from typing import Any

from orch.spec_errors import quoted

MAX_NODES = 1000  # num_nodes
MAX_DISK_GB = 65536  # 64 TiB, the largest single volume AWS, GCP or Azure offer
MAX_ACCELERATORS = 64  # per node; the largest instance types have 16 GPUs (32 TPU chips)

_NUMBER_OR_PLUS = re.compile(r"^\s*(\d+(\.\d+)?)\s*(\+?)\s*$")
_MEMORY_RATIO = re.compile(r"^\s*(\d+(\.\d+)?)\s*[xX]\s*$")


def number_or_plus(value: Any, what: str) -> str | None:
    """Normalise ``4``, ``"4"``, ``"4+"``, ``"16GB"`` into ``"4"`` / ``"4+"``; memory may
    also be ``"8x"``: at least 8 GiB per vCPU of the instance (SkyPilot's ratio form)."""
    if value is None:
        return None
    text = str(value).strip()
    if what == "memory":
        text = re.sub(r"(?i)\s*gb?(\+?)$", r"\1", text)
    ratio = _MEMORY_RATIO.match(text) if what == "memory" else None
    match = ratio or _NUMBER_OR_PLUS.match(text)
    if not match or float(match.group(1)) <= 0:
        forms = "'+' or 'x' (per vCPU)" if what == "memory" else "'+'"
        raise ValueError(f"expected a positive number, optionally followed by {forms}, "
                         f"got {quoted(value)}")
    number = match.group(1)
    if number.endswith(".0"):
        number = number[:-2]
    return number + ("x" if ratio else match.group(3))


def parse_accelerators(value: Any) -> dict[str, int | None] | None:
    """``"A100:8"`` → ``{"A100": 8}``; a mapping is kept (``None`` counts mean "any of")."""
    if value is None:
        return None
    if isinstance(value, str):
        name, _, count = value.partition(":")
        if not name.strip() or count.count(":"):
            raise ValueError(f"expected NAME or NAME:COUNT, got {quoted(value)}")
        try:
            number = float(count) if count else 1
        except ValueError:
            raise ValueError(f"expected NAME:COUNT with a whole count, got {quoted(value)}"
                             ) from None
        return {name.strip(): accelerator_count(name.strip(), number)}
    if isinstance(value, dict):
        parsed: dict[str, int | None] = {}
        for name, count in value.items():
            if count is None:  # YAML's set form {A100:8, H100:8}: counts inside the names
                parsed.update(parse_accelerators(str(name)) or {})
                continue
            if not str(name).strip():
                raise ValueError(f"expected accelerator names as keys, got {quoted(name)}")
            parsed[str(name)] = accelerator_count(str(name), count)
        return parsed
    raise ValueError(f"expected NAME, NAME:COUNT, a mapping or a list, got {quoted(value)}")


def accelerator_count(name: str, count: object) -> int:
    """A whole count from 1 to MAX_ACCELERATORS (``8.0`` is 8); the module docstring says
    why fractions are refused."""
    shown = f"count of {quoted(name)}"
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise ValueError(f"{shown} must be a whole number, got {quoted(count)}")
    if count != count or count <= 0:  # NaN, zero, negative
        raise ValueError(f"{shown} must be at least 1, got {count:g}")
    if not float(count).is_integer():
        raise ValueError(f"{shown} must be a whole number, got {count:g} (fractional GPUs "
                         "only share a GPU of an existing SkyPilot cluster; orch schedules "
                         "whole ones)")
    if count > MAX_ACCELERATORS:
        raise ValueError(f"{shown} is {count:g}; at most {MAX_ACCELERATORS} per node")
    return int(count)


def parse_ports(value: Any) -> list[str]:
    """``8080``, ``"9000-9010"`` or a list of them, each port from 1 to 65535."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    ports = []
    for item in items:
        text = str(item).strip() if isinstance(item, int | str) and not isinstance(
            item, bool) else ""
        match = re.fullmatch(r"(\d{1,5})(?:\s*-\s*(\d{1,5}))?", text)
        if not match:
            raise ValueError(f"expected a port or a range like 8000-8010, got {quoted(item)}")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= low <= 65535 or not 1 <= high <= 65535:
            raise ValueError(f"ports are 1 to 65535, got {quoted(item)}")
        if low > high:
            raise ValueError(f"the range {text} is reversed; write {high}-{low}")
        ports.append(f"{low}-{high}" if match.group(2) else str(low))
    return ports
