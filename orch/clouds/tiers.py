"""What SkyPilot's ``disk_tier`` and ``network_tier`` mean on each cloud.

Disk tiers follow SkyPilot's targets (low ≈ 1k IOPS, medium ≈ 3k, high ≈ 6k, ultra ≈ 60k)
with each cloud's documented boot-disk types; no tier given means medium, SkyPilot's
default. A tier an instance type cannot boot from is not offered: the optimizer drops
that candidate (:func:`disk_tier_fits`), so nothing is planned with the tier dropped.
``best`` is the highest tier the type takes.

* AWS (EBS): low ``standard``; medium/high ``gp3`` with 3,500/6,000 IOPS and throughput
  IOPS/16 MB/s; ultra ``io2`` with 20,000 IOPS. gp3 and io2 allow at most 500 IOPS per
  GiB, so small disks get less.
* GCP: low ``pd-standard``, medium ``pd-balanced``, high ``pd-ssd``, ultra ``pd-extreme``
  (20,000 provisioned IOPS), which GCP offers only on N2 types with 64+ vCPUs and M1/M2/M3.
* Azure: low ``Standard_LRS``, medium ``StandardSSD_LRS``, high ``Premium_LRS`` (only on
  sizes with premium storage: an ``s`` among the size's feature letters, e.g.
  ``Standard_D4s_v5``); Azure cannot boot from Ultra disks, so ultra is not offered.

Network ``best`` is best effort, as in SkyPilot: EFA on AWS types that support it (the
type's ``NetworkInfo.EfaSupported``), gVNIC with Tier_1 egress on GCP types of 30+ vCPUs
(gVNIC alone below), accelerated networking on Azure NICs of sizes with 2+ vCPUs.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any


class DiskTier(StrEnum):
    """SkyPilot's tiers: roughly 1k / 3k / 6k / 60k IOPS; ``best``: the highest the
    chosen instance type takes."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    ULTRA = "ultra"
    BEST = "best"


class NetworkTier(StrEnum):
    STANDARD = "standard"
    BEST = "best"


_ORDER = (DiskTier.LOW, DiskTier.MEDIUM, DiskTier.HIGH, DiskTier.ULTRA)
_AWS_IOPS = {DiskTier.MEDIUM: 3500, DiskTier.HIGH: 6000, DiskTier.ULTRA: 20000}
_GCP_TYPES = {DiskTier.LOW: "pd-standard", DiskTier.MEDIUM: "pd-balanced",
              DiskTier.HIGH: "pd-ssd", DiskTier.ULTRA: "pd-extreme"}
_AZURE_TYPES = {DiskTier.LOW: "Standard_LRS", DiskTier.MEDIUM: "StandardSSD_LRS",
                DiskTier.HIGH: "Premium_LRS"}
_GCP_EXTREME = re.compile(r"^(m1|m2|m3)-|^n2-\w+-(64|80|96|128)$")
_AZURE_PREMIUM = re.compile(r"^Standard_[A-Z]+\d+(-\d+)?[a-z]*s[a-z]*(_|$)")
GCP_EXTREME_IOPS = 20000


def _highest(cloud: str, instance_type: str | None) -> DiskTier:
    return next(t for t in reversed(_ORDER) if _takes(cloud, t, instance_type))


def _takes(cloud: str, tier: DiskTier, instance_type: str | None) -> bool:
    if cloud == "gcp" and tier == DiskTier.ULTRA:
        return bool(instance_type and _GCP_EXTREME.match(instance_type))
    if cloud == "azure":
        if tier == DiskTier.ULTRA:
            return False
        if tier == DiskTier.HIGH:
            return bool(instance_type and _AZURE_PREMIUM.match(instance_type))
    return True


def effective_tier(cloud: str, tier: DiskTier | None, instance_type: str | None
                   ) -> DiskTier:
    """The tier to provision: medium when none is given, ``best`` resolved."""
    if tier is None:
        return DiskTier.MEDIUM
    return _highest(cloud, instance_type) if tier == DiskTier.BEST else tier


def disk_tier_fits(cloud: str, tier: DiskTier | None, instance_type: str | None) -> bool:
    """Whether ``instance_type`` on ``cloud`` can boot from ``tier`` (local takes any)."""
    if cloud not in ("aws", "gcp", "azure"):
        return True
    return _takes(cloud, effective_tier(cloud, tier, instance_type), instance_type)


def aws_ebs(tier: DiskTier | None, instance_type: str, disk_gb: int) -> dict[str, Any]:
    """The ``Ebs`` settings of the root volume, beside its size."""
    chosen = effective_tier("aws", tier, instance_type)
    if chosen == DiskTier.LOW:
        return {"VolumeType": "standard"}
    iops = min(_AWS_IOPS[chosen], 500 * disk_gb)
    if chosen == DiskTier.ULTRA:
        return {"VolumeType": "io2", "Iops": max(iops, 100)}
    iops = max(iops, 3000)
    return {"VolumeType": "gp3", "Iops": iops, "Throughput": min(iops // 16, 1000)}


def gcp_disk(tier: DiskTier | None, instance_type: str, zone: str) -> dict[str, Any]:
    """The boot disk's ``initializeParams`` beside its size and image."""
    chosen = effective_tier("gcp", tier, instance_type)
    params: dict[str, Any] = {"diskType": f"zones/{zone}/diskTypes/{_GCP_TYPES[chosen]}"}
    if chosen == DiskTier.ULTRA:
        params["provisionedIops"] = str(GCP_EXTREME_IOPS)
    return params


def azure_storage_account_type(tier: DiskTier | None, instance_type: str) -> str:
    return _AZURE_TYPES[effective_tier("azure", tier, instance_type)]


def wants_best_network(tier: NetworkTier | None) -> bool:
    return tier == NetworkTier.BEST
