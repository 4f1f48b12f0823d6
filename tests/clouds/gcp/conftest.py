"""A fresh Compute Engine fake per test, and a provider pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from orch.clouds.base import ProvisionConfig
from orch.clouds.gcp import GCPProvider
from orch.clouds.gcp_client import GCPSettings
from tests.fakes.gcp_compute_fake import GCPComputeFake

REGION = "us-central1"
ZONE = "us-central1-a"


@pytest.fixture(autouse=True)
def no_gcloud_config(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                     ) -> None:
    """No application-default credentials but a test's own: gcloud's config directory is
    an empty one (google-auth and orch read ``CLOUDSDK_CONFIG``)."""
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path_factory.mktemp("gcloud")))


@pytest.fixture
def fake() -> Iterator[GCPComputeFake]:
    with GCPComputeFake() as server:
        yield server


@pytest.fixture
def provider(fake: GCPComputeFake) -> GCPProvider:
    # Polls are counted, never timed: the fake moves one step per read.
    settings = GCPSettings(project=fake.project, endpoint=fake.endpoint)
    return GCPProvider(settings)


@pytest.fixture
def config() -> Callable[..., ProvisionConfig]:
    def make(**overrides: Any) -> ProvisionConfig:
        fields: dict[str, Any] = {
            "cluster_name": "c1",
            "num_nodes": 2,
            "region": REGION,
            "zone": ZONE,
            "instance_type": "n2-standard-8",
            "idempotency_token": "attempt-1",
        }
        return ProvisionConfig(**(fields | overrides))

    return make
