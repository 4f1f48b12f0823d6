"""A task's secrets (SkyPilot's ``secrets:``): values that reach setup and run like envs
but are shown as ``<redacted>`` everywhere else.

How a secret stays secret:

* In memory a value is a :class:`Secret` (pydantic's ``SecretStr``): ``str``, ``repr``,
  ``model_dump()`` and ``model_dump_json()`` give ``<redacted>``, so a log line, an error
  message or a ``--json`` display built from a model never holds the value.
* Only a serialization asked for with :func:`reveal_context`
  (``model_dump_json(context=reveal_context())``, or ``pydantic_core.to_json``) writes
  the clear value. Two writers ask for it: orch's Temporal payload converter
  (``orch.client.codec``), which also learns from the context that the payload holds a
  secret and has it encrypted before it leaves the process, and the node side
  (``orch.runtime.jobs``), which writes a job's spec to a 0600 file on the head, read by
  the job's driver, that puts it in the environment of the user's command.
* Values are never turned into plain ``str`` fields on the way (envs and secrets travel
  side by side, merged only in the environment of the process that runs setup or run).

This module needs pydantic only: the nodes import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import PlainSerializer, SecretStr, SerializationInfo

REDACTED = "<redacted>"
_REVEAL = "orch_reveal_secrets"
_SEEN = "orch_secrets_seen"


class SecretValue(SecretStr):
    """A secret string; shown as ``<redacted>``."""

    def _display(self) -> str:
        return REDACTED


def _serialize(value: SecretStr, info: SerializationInfo) -> str | SecretStr:
    context = info.context
    if isinstance(context, dict) and context.get(_REVEAL):
        context[_SEEN] = True
        return value.get_secret_value()
    return REDACTED if info.mode_is_json() else value


Secret = Annotated[SecretValue, PlainSerializer(_serialize)]
"""The field type of a secret value (a mapping of them: ``dict[str, Secret]``)."""

def reveal_context() -> dict[str, Any]:
    """The serialization context that writes secrets in clear: a fresh one for each
    serialization, as it records (see :func:`revealed_any`) whether one was written."""
    return {_REVEAL: True}


def revealed_any(context: Mapping[str, Any]) -> bool:
    """Whether a serialization run with ``context`` wrote a secret in clear."""
    return bool(context.get(_SEEN))


def clear_values(secrets: Mapping[str, SecretStr]) -> dict[str, str]:
    """The values, for the environment of the process that needs them (nowhere else)."""
    return {name: value.get_secret_value() for name, value in secrets.items()}


def redacted(secrets: Mapping[str, object]) -> dict[str, str]:
    """What displays show: every name, no value."""
    return dict.fromkeys(secrets, REDACTED)
