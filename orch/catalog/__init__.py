"""The instance catalog shipped with orch: instance types, vCPUs, memory, accelerators,
regions, zones, on-demand and spot prices per cloud (data/*.csv; see data/SOURCES.md)."""

from orch.catalog.loader import CATALOG_CLOUDS, CloudCatalog, catalog_date, load_catalog
from orch.catalog.queries import AcceleratorOffer, list_accelerators
from orch.catalog.rows import CatalogError, CatalogRow

__all__ = [
    "CATALOG_CLOUDS",
    "AcceleratorOffer",
    "CatalogError",
    "CatalogRow",
    "CloudCatalog",
    "catalog_date",
    "list_accelerators",
    "load_catalog",
]
