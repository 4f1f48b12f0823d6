"""Session-scoped storage servers (see ``servers.py``) and a ``store`` fixture that runs a
test once per store, built as orch builds it (``get_store``) with its server's variables
set."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from orch.storage import get_store
from orch.storage.base import BucketRef, Store, StoreKind
from tests.storage.servers import LocalHome

# The multipart/resumable/block threshold the tests lower every store to, so that a 6 MiB
# file takes the multi-part path (S3's smallest part is 5 MiB, and moto enforces it).
PART_SIZE = 5 * 1024 * 1024


@pytest.fixture(scope="session")
def local_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHome]:
    home = LocalHome(tmp_path_factory.mktemp("orch-home"))
    yield home
    home.stop()


SERVER_FIXTURES = {StoreKind.LOCAL: "local_home"}


@pytest.fixture(params=list(SERVER_FIXTURES), ids=lambda kind: kind.value)
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Each store in turn, reaching its server through the environment only."""
    server = request.getfixturevalue(SERVER_FIXTURES[request.param])
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    built = get_store(request.param)
    if hasattr(built, "part_size"):
        built.part_size = PART_SIZE
    return built


def new_bucket(store: Store, prefix: str = "") -> BucketRef:
    """A name no other test uses (the servers are shared by the session)."""
    return BucketRef(store=store.kind, name=f"orch-t-{uuid.uuid4().hex[:12]}", prefix=prefix,
                     account=getattr(store, "default_account", None))
