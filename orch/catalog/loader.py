"""Loading the shipped catalog files, once per process, with the lookups the optimizer needs.

The full catalog is large (Azure alone has ~57k rows), and a CLI command usually needs a
small part of it: the default CPU families, or the rows of one accelerator or instance
type. So a cloud's file is read as text lines once, and each part is parsed when first
asked for (:class:`CloudCatalog`); ``rows`` parses everything.
"""

from __future__ import annotations

import bisect
import csv
import functools
import json
from collections.abc import Callable
from importlib import resources

from orch.catalog.families import is_default_cpu_type
from orch.catalog.rows import CatalogRow, parse_rows

CATALOG_CLOUDS = ("aws", "gcp", "azure")
METADATA_FILE = "catalog.json"  # written by scripts/refresh_catalog.py with the CSVs


class CloudCatalog:
    """One cloud's catalog: its data lines (sorted by instance type, as the refresh script
    writes them) and the parts parsed from them on first use."""

    def __init__(self, cloud: str, source: str, lines: list[str]) -> None:
        self.cloud = cloud
        self.source = source
        self._header = lines[0]
        self._lines = lines[1:]

    @classmethod
    def of_text(cls, cloud: str, source: str, text: str) -> CloudCatalog:
        return cls(cloud, source, text.splitlines())

    def _parse(self, lines: list[str]) -> tuple[CatalogRow, ...]:
        return tuple(parse_rows(self.cloud, self.source, csv.reader([self._header, *lines])))

    def _select(self, keep: Callable[[list[str]], bool]) -> tuple[CatalogRow, ...]:
        return self._parse([ln for ln in self._lines if keep(ln.split(",", 2))])

    @functools.cached_property
    def rows(self) -> tuple[CatalogRow, ...]:
        """Every row (parses the whole file: for listings, not for planning)."""
        return self._parse(self._lines)

    @functools.cached_property
    def _types(self) -> list[str]:
        return [ln.split(",", 1)[0] for ln in self._lines]

    @functools.cached_property
    def instance_types(self) -> frozenset[str]:
        return frozenset(self._types)

    @functools.cached_property
    def default_cpu_rows(self) -> tuple[CatalogRow, ...]:
        """Rows of SkyPilot's default CPU families (:mod:`orch.catalog.families`)."""
        lines: list[str] = []
        for itype in sorted(t for t in self.instance_types if is_default_cpu_type(self.cloud, t)):
            lines += self._lines[slice(*self._range(itype))]
        return tuple(r for r in self._parse(lines) if r.accelerator_name is None)

    @functools.cached_property
    def cpu_rows(self) -> tuple[CatalogRow, ...]:
        """Every row without accelerators (parses most of the file: a fallback only)."""
        return self._select(lambda f: not f[1])

    @functools.cached_property
    def accelerator_rows(self) -> dict[tuple[str, int], tuple[CatalogRow, ...]]:
        """Rows with accelerators, by (name, count)."""
        by_key: dict[tuple[str, int], list[CatalogRow]] = {}
        for row in self._select(lambda f: bool(f[1])):
            by_key.setdefault((row.accelerator_name or "", row.accelerator_count),
                              []).append(row)
        return {key: tuple(rows) for key, rows in by_key.items()}

    @functools.cached_property
    def accelerator_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.accelerator_rows)

    def rows_of_type(self, instance_type: str) -> tuple[CatalogRow, ...]:
        """The rows of one instance type (a slice of the sorted lines)."""
        return self._parse(self._lines[slice(*self._range(instance_type))])

    def _range(self, instance_type: str) -> tuple[int, int]:
        start = bisect.bisect_left(self._types, instance_type)
        return start, bisect.bisect_right(self._types, instance_type, lo=start)

    @functools.cached_property
    def zones_by_region(self) -> dict[str, frozenset[str]]:
        zones: dict[str, set[str]] = {}
        for region, zone in {tuple(ln.rsplit(",", 2)[1:]) for ln in self._lines}:
            zones.setdefault(region, set()).update([zone] if zone else [])
        return {region: frozenset(z) for region, z in zones.items()}


@functools.cache
def load_catalog(cloud: str) -> CloudCatalog:
    """The catalog of ``cloud`` (one of :data:`CATALOG_CLOUDS`), read once per process."""
    if cloud not in CATALOG_CLOUDS:
        raise ValueError(f"no catalog for cloud {cloud!r}; catalogs: {', '.join(CATALOG_CLOUDS)}")
    resource = resources.files("orch.catalog").joinpath("data", f"{cloud}.csv")
    catalog = CloudCatalog.of_text(cloud, str(resource), resource.read_text(encoding="utf-8"))
    catalog._parse([])  # the header is checked now, not on first use
    return catalog


def catalog_date() -> str:
    """The date of the prices in the shipped catalog, as ``scripts/refresh_catalog.py``
    recorded it in ``data/catalog.json`` next to the CSVs ("unknown" if it is missing)."""
    resource = resources.files("orch.catalog").joinpath("data", METADATA_FILE)
    try:
        return str(json.loads(resource.read_text(encoding="utf-8"))["date"])
    except (OSError, ValueError, KeyError):
        return "unknown"
