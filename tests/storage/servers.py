"""The storage services the tests talk to, each a real server on a free loopback port:
moto's S3 server, a GCS emulator, Azurite; the local store's "server" is a directory.

Each server has ``env``: the variables that point a store built by
``orch.storage.get_store(kind)`` (and rclone, and a worker process) at it, and nothing
else. The fixtures in ``tests/storage/conftest.py`` start them once per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orch.storage.base import StoreKind


@dataclass
class LocalHome:
    """The local store needs no server: its buckets live under ``$ORCH_HOME/storage``."""

    root: Path
    kind: StoreKind = StoreKind.LOCAL
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.env = {"ORCH_HOME": str(self.root)}

    def stop(self) -> None:
        """Nothing runs: the directory goes with pytest's temporary directories."""
