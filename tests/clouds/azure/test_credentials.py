"""``credentials_ok`` and how the provider is configured from the environment."""

from __future__ import annotations

import pytest

from orch.clouds import get_provider
from orch.clouds.azure import AzureProvider
from tests.clouds.azure.support import StaticToken
from tests.fakes.azure_arm_fake import AzureArmFake


def test_credentials_ok(fake: AzureArmFake) -> None:
    credential = StaticToken(fake.token)
    provider = AzureProvider(credential=credential)

    assert provider.credentials_ok() == (True, f"subscription {fake.subscription_id}")
    # with an endpoint override the token is asked for that endpoint's audience
    assert credential.scopes[0] == (f"{fake.base_url}/.default",)


def test_unregistered_resource_provider(provider: AzureProvider, fake: AzureArmFake) -> None:
    fake.registered_providers.discard("Microsoft.Network")
    ok, reason = provider.credentials_ok()
    assert not ok and "Microsoft.Network is not registered" in reason


def test_rejected_token(fake: AzureArmFake) -> None:
    ok, reason = AzureProvider(credential=StaticToken("expired")).credentials_ok()
    assert not ok and "access token is invalid" in reason


def test_configured_from_the_environment(fake: AzureArmFake) -> None:
    provider = get_provider("azure")
    assert isinstance(provider, AzureProvider)
    assert provider.endpoint == fake.base_url
    assert provider.subscription_id == fake.subscription_id


def test_no_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    provider = get_provider("azure")
    assert isinstance(provider, AzureProvider)
    ok, reason = provider.credentials_ok()
    assert not ok and "AZURE_SUBSCRIPTION_ID is not set" in reason
