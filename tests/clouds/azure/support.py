"""Helpers for the Azure provider tests: a static-token credential, the environment that
points the SDK at the fake, and a config builder."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from orch.clouds.base import ProvisionConfig
from tests.fakes.azure_arm_fake import AzureArmFake

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBWg1n0K7d3r5Zy9W0sbVgGgqS6v5Yj7mQ2x7w0cV0Zx orch"


class StaticToken:
    """A TokenCredential that hands out one fixed bearer token."""

    def __init__(self, token: str):
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


def point_sdk_at(fake: AzureArmFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """ORCH_AZURE_ENDPOINT and AZURE_SUBSCRIPTION_ID name the fake; REQUESTS_CA_BUNDLE
    trusts its self-signed certificate."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", fake.ca_path)
    monkeypatch.setenv("ORCH_AZURE_ENDPOINT", fake.base_url)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", fake.subscription_id)


def config(cluster: str = "c1", num_nodes: int = 2, **overrides: Any) -> ProvisionConfig:
    values: dict[str, Any] = {
        "cluster_name": cluster,
        "num_nodes": num_nodes,
        "region": "eastus",
        "instance_type": "Standard_D2s_v3",
        "ssh_public_key": SSH_KEY,
        **overrides,
    }
    return ProvisionConfig(**values)
