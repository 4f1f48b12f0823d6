"""Session-scoped storage servers (see ``servers.py``) and a ``store`` fixture that runs a
test once per store, built as orch builds it (``get_store``) with its server's variables
set."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orch.storage import get_store
from orch.storage.base import BucketRef, Store, StoreKind
from tests.storage.servers import Azurite, GCSEmulator, LocalHome, MotoS3

# The multipart/resumable/block threshold the tests lower every store to, so that a 6 MiB
# file takes the multi-part path (S3's smallest part is 5 MiB, and moto enforces it).
PART_SIZE = 5 * 1024 * 1024


def _session_server(name: str, server_type: Callable[[Path], Any]) -> Any:
    """A session-scoped fixture ``name`` starting ``server_type`` in a directory of its own
    (logs, config) and stopping it at the end."""

    @pytest.fixture(scope="session", name=name)
    def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        started = server_type(tmp_path_factory.mktemp(name))
        yield started
        started.stop()

    return server


local_home = _session_server("local_home", LocalHome)
moto_s3 = _session_server("moto_s3", MotoS3)
gcs_emulator = _session_server("gcs_emulator", GCSEmulator)
azurite = _session_server("azurite", Azurite)

SERVER_FIXTURES = {StoreKind.LOCAL: "local_home", StoreKind.S3: "moto_s3",
                   StoreKind.GCS: "gcs_emulator", StoreKind.AZURE: "azurite"}
# What a store reads from the environment: cleared first, so the machine's own settings
# (a profile, an ADC file, a connection string) never reach a test.
_STORE_VARIABLE_PREFIXES = ("AWS_", "GOOGLE_", "CLOUDSDK_", "STORAGE_EMULATOR", "AZURE_",
                            "ORCH_CLOUD_IDENTITY")


def clear_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_STORE_VARIABLE_PREFIXES):
            monkeypatch.delenv(name)


def use_server(server: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point stores at ``server`` through the environment only (as a worker would be)."""
    clear_store_env(monkeypatch)
    for name, value in server.env.items():  # type: ignore[attr-defined]
        monkeypatch.setenv(name, value)


@pytest.fixture(params=list(SERVER_FIXTURES), ids=lambda kind: kind.value)
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Each store in turn, reaching its server through the environment only."""
    use_server(request.getfixturevalue(SERVER_FIXTURES[request.param]), monkeypatch)
    built = get_store(request.param)
    if hasattr(built, "part_size"):
        built.part_size = PART_SIZE
    return built


def new_bucket(store: Store, prefix: str = "") -> BucketRef:
    """A name no other test uses (the servers are shared by the session)."""
    return BucketRef(store=store.kind, name=f"orch-t-{uuid.uuid4().hex[:12]}", prefix=prefix,
                     account=getattr(store, "default_account", None))
