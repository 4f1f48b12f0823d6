"""The optimizer: turn a task's resource request into launch candidates, cheapest first.

This module validates each resource alternative against the catalogs (names, regions,
zones, enabled and allowed clouds) and ranks what :mod:`orch.offers` finds for it. A
candidate is one cloud region (with its usable zones, cheapest first) and one instance
type: SkyPilot's shape, the cheapest fitting type of each zone, not every type in every
zone (:mod:`orch.offers` says which rows may serve and how sizes are read). The request is
read as SkyPilot reads it:

* ``cpus``/``memory`` ``"4"`` means at least 4 but prefers the smallest fit per region;
  ``"4+"`` any size from 4 up; ``memory: "8x"`` at least 8 GiB per vCPU. A CPU-only request
  without an instance type gets SkyPilot's default CPU families, with ``cpus: 8+`` when
  nothing is sized and ``memory: 4x`` when memory is not (:data:`DEFAULT_CPUS`,
  :data:`DEFAULT_MEMORY`).
* Accelerators match by exact count and by name as SkyPilot resolves it: case-insensitive,
  its aliases (``A100-40GB``), or the one catalog name that contains the given one;
  instance types with accelerators are only offered when accelerators (or that instance
  type) are asked for.
* ``any_of`` alternatives are merged and sorted by price; ``ordered`` alternatives keep the
  user's order of preference, by price within each.
* The ``local`` cloud (this machine) always exists, costs nothing, has one region "local"
  without zones, no instance types, no GPUs and no spot; it is a candidate only when the
  request names none of those and its per-node cpus/memory fit this host.
* Blocked parts of the search space (:class:`orch.failover_rules.Blocklist`) are left out.
* The config's ``allowed_clouds`` (local included) bound the search; a resource set naming
  a cloud outside them is infeasible, with a message saying so.
* The config's ``default_region`` of a cloud is preferred, not required: when a resource set
  names that cloud but no region or zone, its candidates in that region come first (then
  the rest, cheapest first), so failover still reaches the other regions when the default
  one has no capacity. (SkyPilot has no such knob; requiring it would turn a stockout in
  one region into a failed launch, and ``region:`` in the task already says "only there".)

Unknown names raise :class:`UnknownResourceError` with "did you mean" suggestions; requests
nothing can satisfy raise :class:`InfeasibleResourcesError` saying why, per cloud.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orch.catalog import CATALOG_CLOUDS, list_accelerators, load_catalog
from orch.catalog.families import AmbiguousAcceleratorError, canonical_accelerator
from orch.failover_rules import Blocklist, Candidate
from orch.offers import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY,
    LOCAL,
    Ask,
    HostResources,
    Why,
    acc_text,
    catalog_offers,
    counts_text,
    local_offer,
)
from orch.spec import Resources, Task

__all__ = [
    "DEFAULT_CPUS",
    "DEFAULT_MEMORY",
    "Candidate",
    "HostResources",
    "InfeasibleResourcesError",
    "OptimizerError",
    "UnknownResourceError",
    "list_accelerators",
    "plan",
]

_ALL_CLOUDS = (LOCAL, *CATALOG_CLOUDS)


class OptimizerError(Exception):
    """A resource request the optimizer cannot turn into candidates; the message is for
    the user."""


class UnknownResourceError(OptimizerError):
    """A cloud, region, zone, instance type or accelerator name no catalog knows."""


class InfeasibleResourcesError(OptimizerError):
    """Known names, but nothing enabled satisfies the request (the message says why)."""


def plan(task: Task, *, blocklist: Blocklist | None = None,
         enabled_clouds: Iterable[str] | None = None,
         host: HostResources | None = None,
         allowed_clouds: Iterable[str] | None = None,
         default_regions: Mapping[str, str] | None = None) -> list[Candidate]:
    """Every feasible candidate for ``task``, cheapest first (see the module docstring).

    ``enabled_clouds``: the catalog clouds with credentials (None: all of them); the local
    cloud is always enabled. ``host``: this machine's size (detected when None).
    ``allowed_clouds``/``default_regions``: the config's (:mod:`orch.settings`).
    """
    scope = _Scope.of(enabled_clouds, allowed_clouds)
    blocked = blocklist or Blocklist()
    resources = task.resources
    alternatives = resources.alternatives()
    ranked: list[tuple[int, int, Candidate]] = []
    failures: list[tuple[Resources, list[Why]]] = []
    for rank, alternative in enumerate(alternatives):
        try:
            request = _Request.of(alternative, scope)
        except InfeasibleResourcesError as exc:  # other alternatives may still work
            failures.append((alternative, [Why(alternative.cloud or "", str(exc))]))
            continue
        found, reasons = _candidates(request, task.num_nodes, blocked, host)
        found, reasons = _within_budget(alternative, found, reasons)
        found = [c.model_copy(update={"alternative": rank}) for c in found]
        preferred = _preferred_region(alternative, default_regions or {})
        ranked += [(rank if resources.is_ordered else 0, 0 if c.region == preferred else 1, c)
                   for c in found]
        if not found:
            failures.append((alternative, reasons))
    if not ranked:
        raise InfeasibleResourcesError(_infeasible_message(failures))
    ranked.sort(key=lambda rc: (rc[0], rc[1], rc[2].price_per_hour, rc[2].cloud, rc[2].region,
                                rc[2].instance_type or "", rc[2].use_spot))
    unique: dict[tuple[object, ...], Candidate] = {}
    for _, _, candidate in ranked:
        key = (candidate.cloud, candidate.region, candidate.instance_type,
               candidate.use_spot, tuple(sorted((candidate.accelerators or {}).items())))
        unique.setdefault(key, candidate)
    return list(unique.values())


def _preferred_region(res: Resources, default_regions: Mapping[str, str]) -> str | None:
    """The config's default region of the cloud ``res`` names, when it names no region or
    zone: its candidates go first, the other regions stay behind it as failover targets."""
    if res.cloud is None or res.region is not None or res.zone is not None:
        return None
    return default_regions.get(res.cloud)


@dataclass(frozen=True)
class _Scope:
    """The clouds a search may use: ``usable`` (local first, when allowed) are enabled and
    allowed; ``allowed`` is the config's list (None: every cloud)."""

    enabled: tuple[str, ...]
    allowed: tuple[str, ...] | None
    usable: tuple[str, ...]

    @classmethod
    def of(cls, enabled_clouds: Iterable[str] | None,
           allowed_clouds: Iterable[str] | None) -> _Scope:
        enabled = _enabled(enabled_clouds)
        allowed = None if allowed_clouds is None else tuple(c.lower() for c in allowed_clouds)
        usable = tuple(c for c in (LOCAL, *enabled) if allowed is None or c in allowed)
        return cls(enabled=enabled, allowed=allowed, usable=usable)

    def allows(self, cloud: str) -> bool:
        return self.allowed is None or cloud in self.allowed


def _enabled(enabled_clouds: Iterable[str] | None) -> tuple[str, ...]:
    if enabled_clouds is None:
        return CATALOG_CLOUDS
    names = [c.lower() for c in enabled_clouds]
    for name in names:
        if name not in (*CATALOG_CLOUDS, LOCAL):
            raise UnknownResourceError(f"unknown cloud {name!r}" + _suggest(name, _ALL_CLOUDS))
    return tuple(c for c in CATALOG_CLOUDS if c in names)


def _suggest(word: str, options: Iterable[str], *, fold: bool = False) -> str:
    choices = sorted(set(options))
    if fold:
        by_lower = {c.lower(): c for c in choices}
        close = [by_lower[c] for c in difflib.get_close_matches(word.lower(), list(by_lower),
                                                                n=3, cutoff=0.5)]
    else:
        close = difflib.get_close_matches(word, choices, n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


@dataclass(frozen=True)
class _Request:
    """One alternative, validated against the catalogs: names are canonical, ``clouds``
    are the clouds it may use (local included when it may be local)."""

    resources: Resources
    clouds: tuple[str, ...]
    region: str | None
    accelerator: tuple[str, int] | None

    @classmethod
    def of(cls, res: Resources, scope: _Scope) -> _Request:
        if res.cloud is not None and res.cloud not in _ALL_CLOUDS:
            raise UnknownResourceError(
                f"unknown cloud {res.cloud!r}" + _suggest(res.cloud, _ALL_CLOUDS))
        if res.cloud is not None and not scope.allows(res.cloud):
            raise InfeasibleResourcesError(
                f"cloud {res.cloud!r} is not in the config's allowed_clouds "
                f"({', '.join(scope.allowed or ())}); see `orch config show`")
        if res.cloud is not None and res.cloud != LOCAL and res.cloud not in scope.enabled:
            raise InfeasibleResourcesError(
                f"cloud {res.cloud!r} is not enabled (enabled: "
                f"{', '.join(scope.usable)}); run `orch check`")
        clouds = (res.cloud,) if res.cloud else scope.usable
        if not clouds:
            raise InfeasibleResourcesError(
                f"no cloud of the config's allowed_clouds ({', '.join(scope.allowed or ())}) "
                "is enabled; run `orch check`")
        region = _check_location(res, clouds)
        if region is not None:
            clouds = tuple(c for c in clouds if region in _regions_of(c))
        if res.instance_type is not None:
            clouds = _clouds_offering(res.instance_type, res.cloud, clouds, region)
        return cls(resources=res, clouds=clouds, region=region,
                   accelerator=_check_accelerator(res))


def _regions_of(cloud: str) -> dict[str, frozenset[str]]:
    """Regions of a cloud and their zones."""
    return {LOCAL: frozenset()} if cloud == LOCAL else load_catalog(cloud).zones_by_region


def _clouds_offering(itype: str, cloud: str | None, clouds: tuple[str, ...],
                     region: str | None) -> tuple[str, ...]:
    """The clouds (of ``clouds``) that offer instance type ``itype``; ``cloud`` is the one
    the user named, if any."""
    owners = [c for c in CATALOG_CLOUDS if itype in load_catalog(c).instance_types]
    if not owners:
        known = {t for c in CATALOG_CLOUDS for t in load_catalog(c).instance_types}
        raise UnknownResourceError(f"unknown instance type {itype!r}" + _suggest(itype, known))
    usable = tuple(c for c in clouds if c in owners)
    if not usable:
        offered = ", ".join(owners)
        raise InfeasibleResourcesError(
            f"the local cloud has no instance types ({itype!r} is offered by {offered})"
            if cloud == LOCAL
            else f"instance type {itype!r} ({offered}) is not offered in region {region!r}"
            if region is not None
            else f"instance type {itype!r} is offered by {offered}, not {cloud}"
            if cloud
            else f"instance type {itype!r} is offered by {offered}, which is not enabled")
    return usable


def _check_accelerator(res: Resources) -> tuple[str, int] | None:
    if not res.accelerators:
        return None
    if len(res.accelerators) > 1:
        raise InfeasibleResourcesError(
            f"one accelerator type per resource set, got {acc_text(res.accelerators)}; "
            "use any_of or ordered to list alternatives")
    (name, count), = res.accelerators.items()
    known = {n for c in CATALOG_CLOUDS for n in load_catalog(c).accelerator_names}
    try:
        canonical = canonical_accelerator(name, known)
    except AmbiguousAcceleratorError as exc:  # as SkyPilot: "choose one of" the matches
        raise UnknownResourceError(f"unknown accelerator {name!r}; did you mean "
                                   + " or ".join(map(repr, exc.matches)) + "?") from None
    if canonical is None:
        raise UnknownResourceError(
            f"unknown accelerator {name!r}" + _suggest(name, known, fold=True))
    return canonical, count


def _check_location(res: Resources, clouds: tuple[str, ...]) -> str | None:
    """The region asked for (inferred from the zone if only a zone is given)."""
    if res.region is None and res.zone is None:
        return None
    regions: dict[str, frozenset[str]] = {}
    for cloud in clouds:
        regions.update(_regions_of(cloud))
    where = f" on {res.cloud}" if res.cloud else ""
    if res.region is not None and res.region not in regions:
        raise UnknownResourceError(
            f"unknown region {res.region!r}{where}" + _suggest(res.region, regions))
    if res.zone is None:
        return res.region
    owners = [r for r, zones in regions.items() if res.zone in zones]
    if not owners:
        options = regions.get(res.region, frozenset()) if res.region else {
            z for zones in regions.values() for z in zones}
        raise UnknownResourceError(f"unknown zone {res.zone!r}{where}"
                                   + _suggest(res.zone, options))
    if res.region is not None and res.region not in owners:
        raise InfeasibleResourcesError(
            f"zone {res.zone!r} is in region {owners[0]!r}, not {res.region!r}")
    return owners[0]


def _within_budget(res: Resources, found: list[Candidate], reasons: list[Why]
                   ) -> tuple[list[Candidate], list[Why]]:
    """Drops candidates above ``max_hourly_cost`` (per node, as the resources are)."""
    cap = res.max_hourly_cost
    if cap is None:
        return found, reasons
    kept = [c for c in found if c.price_per_node <= cap]
    if found and not kept:
        cheapest = min(c.price_per_node for c in found)
        reasons = [*reasons, Why("", f"the cheapest fit costs ${cheapest:.4f}/h per node, "
                                      f"above max_hourly_cost ${cap:g}")]
    return kept, reasons


def _candidates(request: _Request, num_nodes: int, blocked: Blocklist,
                host: HostResources | None) -> tuple[list[Candidate], list[Why]]:
    found: list[Candidate] = []
    reasons: list[Why] = []
    ask = Ask(resources=request.resources, region=request.region,
              accelerator=request.accelerator)
    for cloud in request.clouds:
        if cloud == LOCAL:
            candidate, why = local_offer(ask, num_nodes, blocked, host or HostResources.detect())
            found += [candidate] if candidate else []
        else:
            more, why = catalog_offers(cloud, ask, num_nodes, blocked)
            found += more
        if why:
            reasons.append(why)
    return found, reasons


def _describe(res: Resources) -> str:
    parts = [
        acc_text(res.accelerators) if res.accelerators else "",
        res.instance_type or "",
        f"cpus {res.cpus}" if res.cpus else "",
        f"memory {res.memory}" if res.memory else "",
        "spot" if res.use_spot else "",
        f"cloud {res.cloud}" if res.cloud else "",
        f"region {res.region}" if res.region else "",
        f"zone {res.zone}" if res.zone else "",
    ]
    return ", ".join(p for p in parts if p) or "default resources"


def _infeasible_message(failures: list[tuple[Resources, list[Why]]]) -> str:
    lines = [f"{_describe(res)}: {_summarize(reasons)}" for res, reasons in failures]
    if len(lines) == 1:
        return f"No resources satisfy {lines[0]}"
    return "No resources satisfy any of the alternatives:\n" + "\n".join(f"  {ln}" for ln in lines)


def _summarize(reasons: list[Why]) -> str:
    """Join the per-cloud reasons; when no catalog cloud offers the accelerator at that
    count, say so once, with the counts that do exist."""
    clouds = [w for w in reasons if w.cloud != LOCAL]
    lacking = [w.lacking for w in clouds if w.lacking is not None]
    if len(clouds) > 1 and len(lacking) == len(clouds):
        name, count = lacking[0][0], lacking[0][1]
        offered = sorted({c for _, _, counts in lacking for c in counts})
        note = f" ({name} comes in counts {counts_text(offered)})" if offered else ""
        texts = [w.text for w in reasons if w.cloud == LOCAL]
        return "; ".join([*texts, f"no enabled cloud offers {name}:{count}{note}"])
    return "; ".join(w.text for w in reasons)
