"""Cloud providers, looked up by name."""

from __future__ import annotations

import importlib

from orch.clouds.base import Provider

_PROVIDERS = {
    "local": "orch.clouds.local:LocalProvider",
    "aws": "orch.clouds.aws:AWSProvider",
    "gcp": "orch.clouds.gcp:GCPProvider",
    "azure": "orch.clouds.azure:AzureProvider",
}

CLOUDS = tuple(_PROVIDERS)


def get_provider(cloud: str) -> Provider:
    """Import lazily: a user of the local cloud never pays for boto3 or the Azure SDK."""
    try:
        module_name, _, attr = _PROVIDERS[cloud].partition(":")
    except KeyError:
        raise ValueError(f"unknown cloud {cloud!r}; known: {', '.join(CLOUDS)}") from None
    provider: Provider = getattr(importlib.import_module(module_name), attr)()
    return provider
