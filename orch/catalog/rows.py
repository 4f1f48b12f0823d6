"""One catalog row and how it is read from the shipped CSV format."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

COLUMNS = (
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
    "Price", "SpotPrice", "Region", "AvailabilityZone",
)


class CatalogError(Exception):
    """A catalog file that cannot be read; names the file and line."""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One instance type offered in one region (and zone, where the cloud has zones).

    Prices are US dollars per hour for one instance; ``spot_price`` is None when the
    instance type has no spot offer there.
    """

    cloud: str
    instance_type: str
    accelerator_name: str | None
    accelerator_count: int
    vcpus: float
    memory_gib: float
    price: float
    spot_price: float | None
    region: str
    zone: str | None

    def price_for(self, use_spot: bool) -> float | None:
        return self.spot_price if use_spot else self.price


def parse_rows(cloud: str, source: str, lines: Iterable[list[str]]) -> Iterator[CatalogRow]:
    """Rows of a CSV whose first line is :data:`COLUMNS`; ``source`` names it in errors."""
    rows = iter(lines)
    header = next(rows, None)
    if header is None or tuple(header) != COLUMNS:
        raise CatalogError(f"{source}: expected the header {','.join(COLUMNS)}, got {header}")
    for number, fields in enumerate(rows, start=2):
        try:
            itype, acc, count, vcpus, memory, price, spot, region, zone = fields
            yield CatalogRow(
                cloud=cloud,
                instance_type=itype,
                accelerator_name=acc or None,
                accelerator_count=int(count) if count else 0,
                vcpus=float(vcpus),
                memory_gib=float(memory),
                price=float(price),
                spot_price=float(spot) if spot else None,
                region=region,
                zone=zone or None,
            )
        except ValueError as exc:
            raise CatalogError(f"{source}:{number}: {exc}") from None
