"""The values inside ``resources`` that are strings with a grammar of their own:
``cpus``/``memory`` (``4``, ``4+``, ``16GB``, ``8x``) and ``accelerators`` (``A100:8``)."""

from __future__ import annotations

import re
from typing import Any

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
                         f"got {value!r}")
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
