"""The offers of one cloud for one validated resource request, in SkyPilot's shape: per
region and zone, the cheapest instance type that fits (not every type in every zone),
grouped into :class:`Candidate` s (one per region and instance type, zones cheapest first).

:mod:`orch.optimizer` validates the request and ranks what this module finds. Which rows
may serve a request, as SkyPilot decides it:

* CPU-only, no instance type named: SkyPilot's default CPU families of the cloud
  (:data:`orch.catalog.families.DEFAULT_CPU_FAMILIES`); with neither cpus nor memory,
  ``cpus: 8+``; with no memory, ``memory: 4x`` (4 GiB per vCPU). When no type of those
  families fits (the curated AWS catalog lacks some, e.g. r6i/r7i), any CPU-only type of
  the cloud that fits, rather than no offer at all.
* Accelerators: the rows of that accelerator at exactly that count; for a GPU GCP attaches
  to an N1 host and no memory asked, an N1 host as SkyPilot sizes it: the cpus asked (or
  the default host's, :func:`orch.catalog.families.gcp_default_host_cpus`) and 4 GiB per
  one of them.
* An instance type: its rows.

A blocked row (:class:`Blocklist`) is skipped before the cheapest of its zone is chosen,
so after a failure the next-cheapest type of that zone comes up.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from orch.catalog import CatalogRow, load_catalog
from orch.catalog.families import is_default_host
from orch.clouds.tiers import disk_tier_fits
from orch.failover_rules import Blocklist, Candidate
from orch.spec import Resources

LOCAL = "local"
# SkyPilot 0.10's default for a task that sizes nothing (its AWS/GCP/Azure catalogs'
# _DEFAULT_NUM_VCPUS = 8 and _DEFAULT_MEMORY_CPU_RATIO = 4).
DEFAULT_CPUS = "8+"
DEFAULT_MEMORY = "4x"


@dataclass(frozen=True)
class HostResources:
    """What this machine offers the local cloud."""

    cpus: int
    memory_gb: float

    @classmethod
    def detect(cls) -> HostResources:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        return cls(cpus=os.cpu_count() or 1, memory_gb=memory)


@dataclass(frozen=True)
class Ask:
    """A validated alternative: canonical names, the region (inferred from a zone)."""

    resources: Resources
    region: str | None
    accelerator: tuple[str, int] | None


@dataclass(frozen=True)
class Why:
    """Why one cloud has no candidate; ``lacking`` = (name, count, counts offered) when it
    is the accelerator count that is missing."""

    cloud: str
    text: str
    lacking: tuple[str, int, tuple[int, ...]] | None = None


def local_offer(ask: Ask, num_nodes: int, blocked: Blocklist,
                host: HostResources) -> tuple[Candidate | None, Why | None]:
    why = _local_obstacle(ask, blocked, host)
    if why:
        return None, Why(LOCAL, why)
    res = ask.resources
    return Candidate(cloud=LOCAL, region=LOCAL, num_nodes=num_nodes, cpus=res.min_cpus(),
                     memory_gb=res.min_memory_gb()), None


def _local_obstacle(ask: Ask, blocked: Blocklist, host: HostResources) -> str:
    """Why the local cloud cannot serve the request ("" when it can)."""
    res = ask.resources
    if ask.accelerator:
        return "the local cloud has no GPUs"
    if res.instance_type:
        return "the local cloud has no instance types"
    if ask.region not in (None, LOCAL):
        return "the local cloud has only the region 'local'"
    if res.use_spot:
        return "the local cloud has no spot instances"
    if res.min_cpus() > host.cpus:
        return f"this host has {host.cpus} CPUs, fewer than {res.min_cpus():g}"
    if res.min_memory_gb() > host.memory_gb:
        return (f"this host has {host.memory_gb:.1f} GiB of memory, "
                f"less than {res.min_memory_gb():g}")
    if blocked.blocks(LOCAL, LOCAL, None, None, False):
        return "the local cloud is blocked by an earlier failure"
    return ""


def _serving_rows(cloud: str, ask: Ask) -> tuple[list[CatalogRow], Why | None]:
    """The rows that may serve ``ask`` before sizing and location (module docstring)."""
    catalog = load_catalog(cloud)
    res = ask.resources
    if res.instance_type is not None:
        rows = list(catalog.rows_of_type(res.instance_type))
        if ask.accelerator is not None:
            rows = [r for r in rows if (r.accelerator_name, r.accelerator_count)
                    == ask.accelerator]
        return rows, None
    if ask.accelerator is None:
        return list(catalog.default_cpu_rows), None
    name, count = ask.accelerator
    rows = list(catalog.accelerator_rows.get((name, count), ()))
    if res.memory is None:
        cpus = float(res.cpus.rstrip("+")) if res.cpus else None
        rows = [r for r in rows if is_default_host(r, cpus)]
    if not rows:
        counts = tuple(sorted(c for n, c in catalog.accelerator_rows if n == name))
        text = (f"{cloud} offers {name} only in counts {counts_text(counts)}" if counts
                else f"{cloud} does not offer {name}")
        return [], Why(cloud, text, lacking=(name, count, counts))
    return rows, None


def catalog_offers(cloud: str, ask: Ask, num_nodes: int,
                   blocked: Blocklist) -> tuple[list[Candidate], Why | None]:
    """Candidates of one catalog cloud (which offers the instance type, if one was asked
    for), or none and the reason."""
    res = ask.resources
    rows, why = _serving_rows(cloud, ask)
    if why is not None:
        return [], why
    what = _describe_offer(res, ask.accelerator)
    if ask.region is not None:
        rows = _located(rows, ask)
        if not rows:
            return [], Why(cloud, f"{cloud} offers no {what} in {res.zone or ask.region}")
    rows = _fit_size(rows, res)
    if not rows and _default_type(res):
        rows = _fit_size(_located(load_catalog(cloud).cpu_rows, ask), res)
    if not rows:
        return [], Why(cloud, f"{cloud} has no {what} with {_size_text(res)}")
    rows = [r for r in rows if disk_tier_fits(cloud, res.disk_tier, r.instance_type)]
    if not rows:
        return [], Why(cloud, f"no instance type that fits boots from disk_tier {res.disk_tier}")
    priced = [(price, r) for r in rows if (price := r.price_for(res.use_spot)) is not None]
    if not priced:
        return [], Why(cloud, f"{cloud} has no spot offer for {what} with {_size_text(res)}")
    found = _cheapest_per_zone(cloud, priced, res.use_spot, num_nodes, blocked)
    if not found:
        return [], Why(cloud, f"every {cloud} candidate for {what} is blocked by earlier failures")
    return found, None


def _located(rows: Iterable[CatalogRow], ask: Ask) -> list[CatalogRow]:
    """The rows in the region and zone asked for (all of them when none is)."""
    zone = ask.resources.zone
    return [r for r in rows if ask.region in (None, r.region) and zone in (None, r.zone)]


def _sizes_nothing(res: Resources) -> bool:
    return res.cpus is None and res.memory is None and res.instance_type is None and (
        not res.accelerators)


def _default_type(res: Resources) -> bool:
    """SkyPilot picks a default CPU instance type: no instance type, no accelerators."""
    return res.instance_type is None and not res.accelerators


def _cpus_asked(res: Resources) -> str | None:
    """The cpus request, defaulting to :data:`DEFAULT_CPUS` when nothing sizes the node."""
    return DEFAULT_CPUS if _sizes_nothing(res) else res.cpus


def _memory_asked(res: Resources) -> Resources:
    """``res`` with :data:`DEFAULT_MEMORY` when a default CPU type is picked without a
    memory request (SkyPilot's rule: 4 GiB per vCPU, also when cpus are given)."""
    if _default_type(res) and res.memory is None:
        return res.model_copy(update={"memory": DEFAULT_MEMORY})
    return res


def _fit_size(rows: list[CatalogRow], res: Resources) -> list[CatalogRow]:
    """Rows with enough vCPUs and memory; an exact-looking ask ("4", not "4+") keeps, per
    region, only the smallest fit."""
    cpus = _cpus_asked(res)
    min_cpus = float(cpus.rstrip("+")) if cpus else 0.0
    sized = _memory_asked(res)
    rows = [r for r in rows
            if r.vcpus >= min_cpus and r.memory_gib >= sized.min_memory_gb(r.vcpus)]
    prefer_fewest_cpus = cpus is not None and not cpus.endswith("+")
    prefer_least_memory = res.memory is not None and not res.memory.endswith(("+", "x"))
    if not (prefer_fewest_cpus or prefer_least_memory):
        return rows

    def size(r: CatalogRow) -> tuple[float, float]:
        return (r.vcpus if prefer_fewest_cpus else 0.0,
                r.memory_gib if prefer_least_memory else 0.0)

    best: dict[str, tuple[float, float]] = {}
    for r in rows:
        best[r.region] = min(best.get(r.region, size(r)), size(r))
    return [r for r in rows if size(r) == best[r.region]]


def _cheapest_per_zone(cloud: str, priced: list[tuple[float, CatalogRow]], use_spot: bool,
                       num_nodes: int, blocked: Blocklist) -> list[Candidate]:
    """The cheapest unblocked row of each (region, zone), grouped into one candidate per
    (region, instance type) with its zones, cheapest first."""
    best: dict[tuple[str, str | None], tuple[float, CatalogRow]] = {}
    for price, r in priced:
        key = (r.region, r.zone)
        held = best.get(key)
        if held is not None and (held[0], held[1].instance_type) <= (price, r.instance_type):
            continue
        if not blocked.blocks(cloud, r.region, r.zone, r.instance_type, use_spot):
            best[key] = (price, r)
    by_key: dict[tuple[str, str], list[tuple[float, CatalogRow]]] = {}
    for price, r in best.values():
        by_key.setdefault((r.region, r.instance_type), []).append((price, r))
    return [_candidate(cloud, offers, use_spot, num_nodes) for offers in by_key.values()]


def _candidate(cloud: str, offers: list[tuple[float, CatalogRow]], use_spot: bool,
               num_nodes: int) -> Candidate:
    offers.sort(key=lambda pr: (pr[0], pr[1].zone or ""))
    price, first = offers[0]
    return Candidate(
        cloud=cloud, region=first.region, zones=[r.zone for _, r in offers if r.zone],
        instance_type=first.instance_type,
        accelerators=({first.accelerator_name: first.accelerator_count}
                      if first.accelerator_name else None),
        use_spot=use_spot, num_nodes=num_nodes, cpus=first.vcpus,
        memory_gb=first.memory_gib, price_per_node=price,
        price_per_hour=round(price * num_nodes, 6),
    )


def acc_text(accelerators: dict[str, int]) -> str:
    return ", ".join(f"{name}:{count}" for name, count in accelerators.items())


def counts_text(counts: Iterable[int]) -> str:
    return ", ".join(str(c) for c in counts)


def _describe_offer(res: Resources, accelerator: tuple[str, int] | None) -> str:
    if res.instance_type:
        return res.instance_type
    if accelerator:
        return f"{accelerator[0]}:{accelerator[1]}"
    return "CPU instance type"


def _size_text(res: Resources) -> str:
    cpus, memory = _cpus_asked(res), _memory_asked(res).memory
    parts = [f"{cpus} vCPUs" if cpus else "",
             f"{memory[:-1]} GiB of memory per vCPU" if memory and memory.endswith("x")
             else f"{memory} GiB of memory" if memory else ""]
    return " and ".join(p for p in parts if p) or "any size"
