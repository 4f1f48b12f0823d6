"""Helpers for the Azure provider tests: a static-token credential, the environment that
points the SDK at the fake, an ``az`` CLI logged in to it, and a config builder."""

from __future__ import annotations

import json
import time
from pathlib import Path
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


def az_login(fake: AzureArmFake, bin_dir: Path) -> Path:
    """An ``az`` in ``bin_dir`` that prints what ``az account get-access-token`` prints
    for a login to the fake: azure-identity's CLI credential (the last link of orch's
    chain) gets the fake's token from it, in any process whose PATH has ``bin_dir``."""
    expires = int(time.time()) + 3600
    printed = {"accessToken": fake.token, "expiresOn": time.strftime(
        "%Y-%m-%d %H:%M:%S.000000", time.localtime(expires)), "expires_on": expires,
        "subscription": fake.subscription_id, "tenant": "72f988bf-0000-4000-8000-0000000000aa",
        "tokenType": "Bearer"}
    bin_dir.mkdir(parents=True, exist_ok=True)
    az = bin_dir / "az"
    az.write_text(f"#!/bin/sh\nprintf '%s\\n' '{json.dumps(printed)}'\n")  # a builtin: no PATH
    az.chmod(0o755)
    return az


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
