"""Catalog questions the CLI asks directly (``orch show-gpus``)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from orch.catalog.families import default_hosts
from orch.catalog.loader import CATALOG_CLOUDS, load_catalog
from orch.catalog.rows import CatalogRow


class AcceleratorOffer(BaseModel):
    """An instance type with accelerators in one region; prices are $/h for one instance,
    the cheapest over the region's zones (``spot_price`` None: no spot offer)."""

    model_config = ConfigDict(frozen=True)

    accelerator: str
    count: int
    cloud: str
    region: str
    instance_type: str
    vcpus: float
    memory_gib: float
    price: float
    spot_price: float | None


def list_accelerators(name_filter: str | None = None,
                      clouds: Iterable[str] | None = None) -> list[AcceleratorOffer]:
    """Offers whose accelerator name contains ``name_filter`` (case-insensitive; ``A100:8``
    also pins the count), sorted by accelerator, count, then on-demand price. GPUs on GCP
    N1 hosts are listed on SkyPilot's default host, as ``sky show-gpus`` lists them."""
    name, _, count_text = (name_filter or "").partition(":")
    count = int(count_text) if count_text else None
    by_offer: dict[tuple[str, str, str, str, int], list[CatalogRow]] = {}
    for cloud in clouds if clouds is not None else CATALOG_CLOUDS:
        for (acc, acc_count), rows in load_catalog(cloud).accelerator_rows.items():
            if name.lower() in acc.lower() and count in (None, acc_count):
                for row in default_hosts(rows):
                    by_offer.setdefault((cloud, row.region, row.instance_type, acc, acc_count),
                                        []).append(row)
    offers = []
    for (cloud, region, itype, _, _), offered in by_offer.items():
        first = offered[0]
        spots = [r.spot_price for r in offered if r.spot_price is not None]
        offers.append(AcceleratorOffer(
            accelerator=first.accelerator_name or "", count=first.accelerator_count,
            cloud=cloud, region=region, instance_type=itype, vcpus=first.vcpus,
            memory_gib=first.memory_gib, price=min(r.price for r in offered),
            spot_price=min(spots) if spots else None,
        ))
    return sorted(offers, key=lambda o: (o.accelerator, o.count, o.price, o.cloud, o.region))
