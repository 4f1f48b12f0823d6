"""``resources.labels``: tags on AWS and Azure instances, labels on GCP ones.

Each cloud has its own key and value rules (from its documentation), checked before
anything starts. A task that names no cloud may fail over to any of them, so its labels
must suit every cloud it could land on; a label only one cloud refuses is reported with
that cloud's name. orch's own tags (``orch-*``) cannot be set by a task: they are how orch
finds a cluster's instances.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_GCP = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_GCP_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_AWS_CHARS = re.compile(r"^[\w .:/=+\-@]*$")
_AZURE_FORBIDDEN = set("<>%&\\?/")


def _aws(key: str, value: str) -> str | None:
    if not 1 <= len(key) <= 128 or len(value) > 256:
        return "AWS tag keys are 1-128 characters and values at most 256"
    if key.lower().startswith("aws:"):
        return "AWS reserves tag keys starting with 'aws:'"
    if not (_AWS_CHARS.match(key) and _AWS_CHARS.match(value)):
        return "AWS tags allow letters, digits, spaces and + - = . _ : / @"
    return None


def _gcp(key: str, value: str) -> str | None:
    if not _GCP.match(key):
        return ("GCP label keys start with a lowercase letter and hold at most 63 lowercase "
                "letters, digits, '_' or '-'")
    if not _GCP_VALUE.match(value):
        return "GCP label values hold at most 63 lowercase letters, digits, '_' or '-'"
    return None


def _azure(key: str, value: str) -> str | None:
    if not 1 <= len(key) <= 512 or len(value) > 256:
        return "Azure tag names are 1-512 characters and values at most 256"
    if _AZURE_FORBIDDEN & set(key):
        return "Azure tag names cannot hold < > % & \\ ? /"
    return None


RULES: dict[str, Callable[[str, str], str | None]] = {"aws": _aws, "gcp": _gcp,
                                                      "azure": _azure}


def parse_labels(value: Any) -> dict[str, str]:
    """A mapping of strings (numbers and booleans are written as text, as YAML gives them)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of label: value, got {value!r}")
    labels: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, dict | list) or item is None:
            raise ValueError(f"label {key!r} needs a text value, got {item!r}")
        text = str(item).lower() if isinstance(item, bool) else str(item)
        if str(key).startswith("orch-"):
            raise ValueError(f"label {key!r}: keys starting with 'orch-' are orch's own")
        labels[str(key)] = text
    return labels


def label_problem(labels: Mapping[str, str], clouds: Iterable[str]) -> str | None:
    """The first label a cloud in ``clouds`` would refuse, as a message; None when all fit.
    Clouds without labels (local) take any."""
    for key, value in labels.items():
        for cloud in clouds:
            rule = RULES.get(cloud)
            why = rule(key, value) if rule else None
            if why:
                return f"label {key!r}: {why}"
    return None
