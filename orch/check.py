"""Which clouds have working credentials here (``orch check``), and why not.

Credentials are looked for where each SDK reads them from files and variables first
(for AWS, botocore's own chain without its instance-metadata step: profiles, SSO,
``credential_process``...); only when some are present does orch ask the cloud (one cheap
identity call), and each provider's answer says where its credentials came from. An
instance's own identity (AWS instance role, GCP metadata server, Azure managed identity)
counts only with the config's ``cloud_identity``: without it no instance-metadata address
is ever asked, from here or from the providers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel

from orch.clouds import get_provider
from orch.clouds.local import host_cpus, host_memory_gb
from orch.settings import load_settings

CATALOG_CLOUDS = ("aws", "gcp", "azure")
CACHE_S = 300.0

# Where the GCP and Azure SDKs find credentials without asking a metadata service.
_ENV = {
    "gcp": ("GOOGLE_APPLICATION_CREDENTIALS", "ORCH_GCP_ENDPOINT"),
    "azure": ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
              "ORCH_AZURE_ENDPOINT"),
}
_FILES = {
    "azure": ("~/.azure/msal_token_cache.json", "~/.azure/azureProfile.json"),
}
_ON_A_VM = "; on a cloud VM, set cloud_identity: true in the config to use its identity"
_HOW = {
    "aws": "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or configure a profile in ~/.aws "
           "(aws configure, aws configure sso)",
    "gcp": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file "
           "(and GOOGLE_CLOUD_PROJECT), or run gcloud auth application-default login",
    "azure": "run az login, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET; "
             "and AZURE_SUBSCRIPTION_ID",
}


class CloudCheck(BaseModel):
    cloud: str
    ok: bool
    reason: str


def _credentials_present(cloud: str, cloud_identity: bool) -> bool:
    if cloud_identity:  # the instance's identity: the provider's call finds out
        return True
    if cloud == "aws":
        return _aws_credentials_present()
    if cloud == "gcp":
        from orch.clouds.gcp_credentials import adc_path
        if adc_path().is_file():
            return True
    return any(os.environ.get(name) for name in _ENV[cloud]) or any(
        Path(path).expanduser().exists() for path in _FILES.get(cloud, ()))


def _aws_credentials_present() -> bool:
    """botocore's chain without the instance role finds some (a failing
    ``credential_process`` counts: the provider's call reports its error)."""
    from botocore.exceptions import BotoCoreError

    from orch.clouds.aws_credentials import found, new_session
    try:
        return found(new_session(cloud_identity=False)) is not None
    except BotoCoreError:
        return True


def check_cloud(cloud: str) -> CloudCheck:
    if cloud == "local":
        return CloudCheck(cloud=cloud, ok=True,
                          reason=f"this machine: {host_cpus()} CPUs, {host_memory_gb():.0f} GB")
    if not _credentials_present(cloud, load_settings().cloud_identity):
        return CloudCheck(cloud=cloud, ok=False,
                          reason=f"no credentials found: {_HOW[cloud]}{_ON_A_VM}")
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
