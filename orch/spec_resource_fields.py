"""SkyPilot's resource fields that shape the machines rather than choose them:
``disk_size``/``memory`` with units, ``disk_tier``, ``network_tier``, ``labels``,
``autostop``, ``max_hourly_cost`` and the per-region ``image_id`` mapping.

Each parser takes the value as written and returns orch's normal form, or raises
ValueError with a message for the user (the spec loader adds the file and field path).
The tiers themselves, and what they mean on each cloud, live in ``orch.clouds.tiers``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from orch.lifecycle import Autostop
from orch.spec_unsupported import AUTOSTOP_HOOK, AUTOSTOP_WAIT_NONE, UNSUPPORTED

_UNITS = {"": 1.0, "k": 2.0**-20, "m": 2.0**-10, "g": 1.0, "t": 2.0**10, "p": 2.0**20}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgtp])i?b?)?\s*$", re.IGNORECASE)


def size_in_gb(value: Any, what: str) -> float:
    """``256``, ``"256GB"``, ``"1TB"``, ``"1024MB"`` → GiB (SkyPilot's units are powers of
    two: KB = 2^10 bytes, …)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a size such as 256 or 256GB for {what}, got {value!r}")
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 256, 256GB or 1TB for {what}, "
                         f"got {value!r}")
    return float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def disk_size_gb(value: Any) -> Any:
    """``disk_size`` in whole GB, floored as SkyPilot does (``1500MB`` → 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # the field's own bounds check it
    return math.floor(size_in_gb(value, "disk_size"))


def memory_with_units(value: Any) -> Any:
    """``"64GB"``/``"1TB+"`` → ``"64"``/``"1024+"`` (GiB), leaving other forms to the
    cpus/memory grammar (``32+``, ``8x``)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    plus = "+" if text.endswith("+") else ""
    body = text.rstrip("+")
    if not re.search(r"[kmgtp]i?b?$", body, re.IGNORECASE) or body.lower().endswith("x"):
        return value
    gb = size_in_gb(body, "memory")
    return f"{gb:g}{plus}"


def autostop_setting(value: Any) -> Autostop | None:
    """SkyPilot's forms: ``true`` (5 idle minutes), ``false``, ``10``, ``"10m"``/``"2h"``/
    ``"1d"``/``"1w"``, or ``{idle_minutes, down, wait_for}``.

    orch's idleness is its own job queue (the controller watches it, not the node), so
    ``wait_for: jobs_and_ssh`` (SkyPilot's default) and ``jobs`` both mean "no job pending
    or running"; ``wait_for: none`` and ``hook`` are refused (see spec_unsupported)."""
    if value is None or value is False:
        return None
    if value is True:
        return Autostop(idle_minutes=5)
    if isinstance(value, int | str) and not isinstance(value, bool):
        return Autostop(idle_minutes=_minutes(value))
    if not isinstance(value, dict):
        raise ValueError(f"expected true, false, minutes (10, 10m, 2h) or a mapping, "
                         f"got {value!r}")
    return _autostop_mapping(value)


_AUTOSTOP_KEYS = ("idle_minutes", "down", "wait_for", "hook", "hook_timeout")


def _autostop_mapping(value: dict[Any, Any]) -> Autostop:
    unknown = sorted(str(k) for k in value if k not in _AUTOSTOP_KEYS)
    if unknown:
        raise ValueError(f"unknown autostop field {unknown[0]!r}; the fields are "
                         + ", ".join(_AUTOSTOP_KEYS))
    if "hook" in value or "hook_timeout" in value:
        raise ValueError(UNSUPPORTED[AUTOSTOP_HOOK])
    wait_for = value.get("wait_for", "jobs_and_ssh")
    if wait_for == "none":
        raise ValueError(UNSUPPORTED[AUTOSTOP_WAIT_NONE])
    if wait_for not in ("jobs_and_ssh", "jobs"):
        raise ValueError(f"wait_for must be jobs_and_ssh, jobs or none, got {wait_for!r}")
    down = value.get("down", False)
    if not isinstance(down, bool):
        raise ValueError(f"down must be true or false, got {down!r}")
    minutes = _minutes(value["idle_minutes"]) if "idle_minutes" in value else 5
    return Autostop(idle_minutes=minutes, down=down)


_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw]?)\s*$")
_MINUTES_PER = {"": 1, "m": 1, "h": 60, "d": 60 * 24, "w": 60 * 24 * 7}


def _minutes(value: int | str) -> int:
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"idle minutes must be 0 or more, got {value}")
        return value
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"expected minutes such as 10, 10m, 2h, 1d or 1w, got {value!r}")
    return int(match.group(1)) * _MINUTES_PER[match.group(2)]


def max_hourly_cost(value: Any) -> Any:
    """US dollars per hour per node; must be positive."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected dollars per hour per node, such as 10.0, got {value!r}")
    if value <= 0:
        raise ValueError(f"must be more than 0, got {value}")
    return float(value)


def image_ids(value: Any) -> Any:
    """A string, or ``{region: image}``: failover then goes only through those regions."""
    if isinstance(value, dict):
        if not value:
            raise ValueError("a per-region image_id mapping needs at least one region")
        bad = [k for k, v in value.items() if not isinstance(v, str) or not v.strip()]
        if bad:
            raise ValueError(f"image_id for region {bad[0]!r} must be an image name")
        return {str(region): image.strip() for region, image in value.items()}
    return value


def image_for(image_id: str | dict[str, str] | None, region: str) -> str | None:
    """The image to boot in ``region``."""
    if isinstance(image_id, dict):
        return image_id.get(region)
    return image_id
