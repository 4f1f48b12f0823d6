"""Loading the shipped catalog files, once per process, with the lookups the optimizer needs."""

from __future__ import annotations

import csv
import functools
import io
import json
from dataclasses import dataclass
from importlib import resources

from orch.catalog.rows import CatalogRow, parse_rows

CATALOG_CLOUDS = ("aws", "gcp", "azure")
METADATA_FILE = "catalog.json"  # written by scripts/refresh_catalog.py with the CSVs


@dataclass(frozen=True)
class CloudCatalog:
    """Every row of one cloud, plus indexes built once (:meth:`of`)."""

    cloud: str
    rows: tuple[CatalogRow, ...]
    instance_types: frozenset[str]
    accelerator_names: frozenset[str]
    zones_by_region: dict[str, frozenset[str]]

    @classmethod
    def of(cls, cloud: str, rows: tuple[CatalogRow, ...]) -> CloudCatalog:
        zones: dict[str, set[str]] = {}
        for row in rows:
            zones.setdefault(row.region, set()).update([row.zone] if row.zone else [])
        return cls(
            cloud=cloud,
            rows=rows,
            instance_types=frozenset(r.instance_type for r in rows),
            accelerator_names=frozenset(r.accelerator_name for r in rows if r.accelerator_name),
            zones_by_region={region: frozenset(z) for region, z in zones.items()},
        )


@functools.cache
def load_catalog(cloud: str) -> CloudCatalog:
    """The catalog of ``cloud`` (one of :data:`CATALOG_CLOUDS`), read once per process."""
    if cloud not in CATALOG_CLOUDS:
        raise ValueError(f"no catalog for cloud {cloud!r}; catalogs: {', '.join(CATALOG_CLOUDS)}")
    resource = resources.files("orch.catalog").joinpath("data", f"{cloud}.csv")
    text = resource.read_text(encoding="utf-8")
    return CloudCatalog.of(cloud, tuple(parse_rows(cloud, str(resource),
                                                   csv.reader(io.StringIO(text)))))


def catalog_date() -> str:
    """The date of the prices in the shipped catalog, as ``scripts/refresh_catalog.py``
    recorded it in ``data/catalog.json`` next to the CSVs ("unknown" if it is missing)."""
    resource = resources.files("orch.catalog").joinpath("data", METADATA_FILE)
    try:
        return str(json.loads(resource.read_text(encoding="utf-8"))["date"])
    except (OSError, ValueError, KeyError):
        return "unknown"
