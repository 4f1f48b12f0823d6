"""Which Azure credential granted the token: managed identity (App Service's
``IDENTITY_ENDPOINT`` and the VM's IMDS, both fakes handing out the ARM fake's token) with
``cloud_identity`` only, and the Azure CLI login (an ``az`` that prints what
``az account get-access-token`` prints). Real azure-identity throughout."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from orch.clouds.azure import AzureProvider
from tests.clouds.azure.support import az_login
from tests.fakes.azure_arm_fake import AzureArmFake
from tests.fakes.instance_metadata import AzureIdentity


@pytest.fixture
def identity(fake: AzureArmFake, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Path) -> Iterator[AzureIdentity]:
    """No service principal, no ``az`` (an empty PATH), orch's config isolated."""
    for name in list(os.environ):
        if name.startswith(("ORCH_CLOUD", "AZURE_CLIENT", "AZURE_TENANT", "IDENTITY_",
                            "MSI_", "AZURE_FEDERATED")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path / "orch-home"))
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with AzureIdentity(lambda: fake.token) as server:
        yield server


def app_service(identity: AzureIdentity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IDENTITY_ENDPOINT", identity.url + AzureIdentity.APP_SERVICE)
    monkeypatch.setenv("IDENTITY_HEADER", identity.secret)


@pytest.mark.parametrize("where", ["app service", "imds"])
def test_with_cloud_identity_the_managed_identity_is_used(
        fake: AzureArmFake, identity: AzureIdentity, monkeypatch: pytest.MonkeyPatch,
        where: str) -> None:
    monkeypatch.setenv("ORCH_CLOUD_IDENTITY", "true")
    if where == "app service":
        app_service(identity, monkeypatch)
    else:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", identity.url)

    result = AzureProvider().credentials_ok()

    assert result == (True, f"subscription {fake.subscription_id} (managed identity)")
    path = AzureIdentity.APP_SERVICE if where == "app service" else AzureIdentity.IMDS
    assert {hit.path.split("?")[0] for hit in identity.hits} == {path}


def test_without_cloud_identity_no_identity_endpoint_is_asked(
        identity: AzureIdentity, monkeypatch: pytest.MonkeyPatch) -> None:
    app_service(identity, monkeypatch)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", identity.url)

    ok, reason = AzureProvider().credentials_ok()

    assert not ok and "Azure CLI not found" in reason, reason
    assert identity.hits == []


def test_the_azure_cli_login(fake: AzureArmFake, identity: AzureIdentity,
                             tmp_path: Path) -> None:
    az_login(fake, tmp_path / "bin")  # the fixture's PATH

    result = AzureProvider().credentials_ok()

    assert result == (True, f"subscription {fake.subscription_id} (Azure CLI login)")
    assert identity.hits == []
