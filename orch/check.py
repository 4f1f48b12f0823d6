"""Which clouds have working credentials here (``orch check``), and why not.

Credentials are looked for where each SDK reads them from files and variables first;
only when some are present does orch ask the cloud (one cheap identity call). So a
machine without credentials never probes a cloud's instance-metadata address.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel

from orch.clouds import get_provider
from orch.clouds.local import host_cpus, host_memory_gb

CATALOG_CLOUDS = ("aws", "gcp", "azure")
CACHE_S = 300.0

# Where each cloud's SDK finds credentials without asking a metadata service.
_ENV = {
    "aws": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE"),
    "gcp": ("GOOGLE_APPLICATION_CREDENTIALS", "ORCH_GCP_ENDPOINT"),
    "azure": ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "ORCH_AZURE_ENDPOINT"),
}
_FILES = {
    "aws": ("~/.aws/credentials", "~/.aws/config"),
    "gcp": ("~/.config/gcloud/application_default_credentials.json",),
    "azure": ("~/.azure/msal_token_cache.json", "~/.azure/azureProfile.json"),
}
_HOW = {
    "aws": "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or configure ~/.aws (aws configure)",
    "gcp": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file "
           "(and GOOGLE_CLOUD_PROJECT), or run gcloud auth application-default login",
    "azure": "run az login, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET; "
             "and AZURE_SUBSCRIPTION_ID",
}


class CloudCheck(BaseModel):
    cloud: str
    ok: bool
    reason: str


def _credentials_present(cloud: str) -> bool:
    return any(os.environ.get(name) for name in _ENV[cloud]) or any(
        Path(path).expanduser().exists() for path in _FILES[cloud]
    )


def check_cloud(cloud: str) -> CloudCheck:
    if cloud == "local":
        return CloudCheck(cloud=cloud, ok=True,
                          reason=f"this machine: {host_cpus()} CPUs, {host_memory_gb():.0f} GB")
    if not _credentials_present(cloud):
        return CloudCheck(cloud=cloud, ok=False, reason=f"no credentials found: {_HOW[cloud]}")
    try:
        ok, reason = get_provider(cloud).credentials_ok()
    except Exception as exc:  # any SDK failure here is a reason to show, not to crash on
        ok, reason = False, f"{type(exc).__name__}: {exc}"
    return CloudCheck(cloud=cloud, ok=ok, reason=reason)


def check_clouds(clouds: tuple[str, ...] = ("local", *CATALOG_CLOUDS),
                 allowed: Collection[str] | None = None) -> list[CloudCheck]:
    """``allowed``: the config's ``allowed_clouds`` (None: every cloud); the others are
    reported as such and not probed, as SkyPilot's ``sky check`` does."""
    return [check_cloud(cloud) if allowed is None or cloud in allowed else
            CloudCheck(cloud=cloud, ok=False,
                       reason="not in the config's allowed_clouds (orch config show)")
            for cloud in clouds]


_cache: tuple[float, tuple[str, ...]] | None = None


def enabled_clouds() -> tuple[str, ...]:
    """The catalog clouds usable from this process, re-checked every few minutes."""
    global _cache
    if _cache is None or time.monotonic() - _cache[0] > CACHE_S:
        _cache = (time.monotonic(),
                  tuple(c.cloud for c in check_clouds(CATALOG_CLOUDS) if c.ok))
    return _cache[1]
