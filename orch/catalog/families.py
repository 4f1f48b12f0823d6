"""What SkyPilot users expect from names: the default CPU families of each cloud (the
machine a CPU-only task gets when it names no instance type) and accelerator names
resolved as SkyPilot resolves them (case-insensitively, with its aliases)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from orch.catalog.rows import CatalogRow

# SkyPilot 0.10+'s _DEFAULT_INSTANCE_FAMILY per cloud (sky/catalog/{aws,gcp,azure}_catalog.py):
# the general-purpose, memory- and compute-optimised families of one recent generation.
DEFAULT_CPU_FAMILIES: dict[str, frozenset[str]] = {
    "aws": frozenset({"m6i", "m6id", "m7i", "r6i", "r6id", "r7i", "c6i", "c6id", "c7i"}),
    "gcp": frozenset({"n2-standard", "n2-highmem", "n2-highcpu", "n4-standard",
                      "n4-highcpu", "n4-highmem"}),
    "azure": frozenset({"Ds_v5", "Es_v5", "Fs_v2"}),
}
# Names SkyPilot users write for a catalog accelerator (memory-qualified spellings of the
# bare names, whose memory SkyPilot's gpu_names states: A100 is 40 GB, V100 16 GB, H100 80).
ACCELERATOR_ALIASES = {"a100-40gb": "A100", "v100-16gb": "V100", "h100-80gb": "H100"}

_AZURE_SIZE = re.compile(r"([A-Za-z]+)([0-9]+)(.*)")


def instance_family(cloud: str, instance_type: str) -> str:
    """The family of an instance type as SkyPilot names it: ``m6i`` (m6i.2xlarge),
    ``n2-standard`` (n2-standard-8), ``Ds_v5`` (Standard_D8s_v5)."""
    if cloud == "aws":
        return instance_type.split(".", 1)[0]
    if cloud == "gcp":
        return instance_type.rsplit("-", 1)[0]
    size = instance_type.removeprefix("Standard_").removesuffix("_Promo")
    if "-" in size:  # constrained-vCPU sizes (Standard_E4-2s_v5) are their own family
        return "constrained"
    match = _AZURE_SIZE.fullmatch(size)
    return match.group(1) + match.group(3) if match else size


def is_default_cpu_type(cloud: str, instance_type: str) -> bool:
    return instance_family(cloud, instance_type) in DEFAULT_CPU_FAMILIES.get(cloud, frozenset())


class AmbiguousAcceleratorError(ValueError):
    """A name that part-matches several catalog accelerators (``matches``)."""

    def __init__(self, name: str, matches: list[str]) -> None:
        super().__init__(f"accelerator {name!r} is ambiguous; choose one of {', '.join(matches)}")
        self.matches = matches


def canonical_accelerator(name: str, known: Iterable[str]) -> str | None:
    """The catalog's spelling of accelerator ``name`` (None: no catalog knows it).

    As SkyPilot's canonicalize_accelerator_name: an exact match ignoring case wins, then an
    alias, then the one catalog name that contains ``name``; several such names are
    ambiguous (:class:`AmbiguousAcceleratorError`).
    """
    by_lower = {k.lower(): k for k in known}
    lower = name.lower()
    if lower in by_lower:
        return by_lower[lower]
    alias = ACCELERATOR_ALIASES.get(lower)
    if alias is not None and alias.lower() in by_lower:
        return by_lower[alias.lower()]
    partial = sorted(k for low, k in by_lower.items() if lower in low)
    if len(partial) > 1:
        raise AmbiguousAcceleratorError(name, partial)
    return partial[0] if partial else None


# GPUs GCP attaches to an N1 host (the other GCP GPUs come with their machine type). When the
# task sizes nothing, SkyPilot's host has at least this many vCPUs and 4 GiB per vCPU
# (gcp_catalog._NUM_ACC_TO_NUM_CPU, "DEFAULT" for the rest); a host may be at most
# (vCPUs, GiB) big (_NUM_ACC_TO_MAX_CPU_AND_MEMORY; GCP's limits per GPU count).
GCP_HOST_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
GCP_HOST_MEMORY_PER_CPU = 4
GCP_HOST_CPUS: dict[str, dict[int, int]] = {
    "K80": {1: 4, 2: 8, 4: 16, 8: 32, 16: 64},
    "V100": {1: 8, 2: 16, 4: 32, 8: 64},
    "T4": {1: 4, 2: 8, 4: 48},
    "P100": {1: 8, 2: 16, 4: 32, 8: 64},
    "DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}
GCP_HOST_MAX: dict[str, dict[int, tuple[int, int]]] = {
    "K80": {1: (8, 52), 2: (16, 104), 4: (32, 208), 8: (64, 208)},
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}


def gcp_default_host_cpus(accelerator: str, count: int) -> int | None:
    """The fewest vCPUs of SkyPilot's default N1 host for ``count`` attached GPUs."""
    return GCP_HOST_CPUS.get(accelerator, GCP_HOST_CPUS["DEFAULT"]).get(count)


def is_default_host(row: CatalogRow, cpus: float | None = None) -> bool:
    """Whether a GCP GPU row's N1 host is one SkyPilot would pick (other rows: always): at
    least ``cpus`` vCPUs (None: the default host's count) and 4 GiB of memory per one of
    them, as SkyPilot sizes the host when the task gives no memory."""
    if row.cloud != "gcp" or not row.instance_type.startswith(GCP_HOST_FAMILIES):
        return True
    least = cpus if cpus is not None else gcp_default_host_cpus(
        row.accelerator_name or "", row.accelerator_count)
    if least is None:
        return True
    return row.vcpus >= least and row.memory_gib >= least * GCP_HOST_MEMORY_PER_CPU


def default_hosts(rows: Iterable[CatalogRow]) -> list[CatalogRow]:
    """``rows`` of one accelerator and count with, per GCP zone, only the cheapest N1 host
    of SkyPilot's default size (other clouds' rows unchanged)."""
    kept: list[CatalogRow] = []
    cheapest: dict[str | None, CatalogRow] = {}
    for row in rows:
        if row.cloud != "gcp" or not row.instance_type.startswith(GCP_HOST_FAMILIES):
            kept.append(row)
        elif is_default_host(row) and (
                row.zone not in cheapest or row.price < cheapest[row.zone].price):
            cheapest[row.zone] = row
    return kept + list(cheapest.values())
