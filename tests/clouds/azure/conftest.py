"""Fixtures: a fresh Azure ARM fake per test, and a provider pointed at it through the
environment (ORCH_AZURE_ENDPOINT, AZURE_SUBSCRIPTION_ID; REQUESTS_CA_BUNDLE trusts the
fake's self-signed certificate)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orch.clouds.azure import AzureProvider
from tests.clouds.azure.support import StaticToken, point_sdk_at
from tests.fakes.azure_arm_fake import AzureArmFake


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureArmFake]:
    with AzureArmFake() as arm:
        point_sdk_at(arm, monkeypatch)
        yield arm


@pytest.fixture
def provider(fake: AzureArmFake) -> AzureProvider:
    return AzureProvider(credential=StaticToken(fake.token))
