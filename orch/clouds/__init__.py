"""Cloud providers, looked up by name."""

from __future__ import annotations

import importlib
import os

from orch.clouds.base import Provider

_PROVIDERS = {
    "local": "orch.clouds.local:LocalProvider",
    "aws": "orch.clouds.aws:AWSProvider",
    "gcp": "orch.clouds.gcp:GCPProvider",
    "azure": "orch.clouds.azure:AzureProvider",
}

CLOUDS = tuple(_PROVIDERS)


def get_provider(cloud: str) -> Provider:
    """Import lazily: a user of the local cloud never pays for boto3 or the Azure SDK.
    The benchmarks' simulated cloud is known only where they enable it (``ORCH_SIMULATED_CLOUD``,
    see ``orch.clouds.simulated``); it is not in :data:`CLOUDS`."""
    if cloud == "simulated" and os.environ.get("ORCH_SIMULATED_CLOUD"):
        from orch.clouds.simulated import SimulatedProvider

        return SimulatedProvider()
    try:
        module_name, _, attr = _PROVIDERS[cloud].partition(":")
    except KeyError:
        raise ValueError(f"unknown cloud {cloud!r}; known: {', '.join(CLOUDS)}") from None
    provider: Provider = getattr(importlib.import_module(module_name), attr)()
    return provider
