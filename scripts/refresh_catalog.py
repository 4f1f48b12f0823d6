"""Regenerate orch's curated catalog (orch/catalog/data/*.csv) from SkyPilot-format CSVs.

Usage::

    python scripts/refresh_catalog.py SOURCE_DIR [--out orch/catalog/data] [--date YYYY-MM-DD]

``SOURCE_DIR`` holds ``aws/vms.csv``, ``gcp/vms.csv`` and ``azure/vms.csv`` in SkyPilot's
catalog format, e.g. a checkout of https://github.com/anycloud-sh/catalog. Only the families
and regions listed below are kept, so the shipped files stay small. Per cloud:

* AWS lists offerings by availability-zone *ID* (``use1-az6``); EC2 calls take zone *names*
  (``us-east-1a``), and the ID-to-name mapping differs between accounts. We translate with one
  real account's mapping (the one moto also uses), so the names are real zones; in another
  account a zone may be aliased differently, which costs at most one failed zone in failover.
* GCP prices a machine type's vCPUs/memory and its GPUs separately (GPU rows have no machine
  type). A GPU machine type (``a2-highgpu-1g``) or a host with attached GPUs (``n1-highmem-8``
  + ``T4``) is priced as the sum of the two in the same zone.
* Azure's file has no zones: rows are per region (``AvailabilityZone`` stays empty).
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

HEADER = [
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
    "Price", "SpotPrice", "Region", "AvailabilityZone",
]

Row = dict[str, str]

AWS_INSTANCE_TYPES = {
    # General purpose, compute and memory optimised (c5 has no 8xlarge; 9xlarge stands in).
    *(f"{family}.{size}" for family in ("m5", "m6i", "m7i", "c6i", "c7i", "r5", "r6i")
      for size in ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge")),
    *(f"c5.{size}" for size in ("large", "xlarge", "2xlarge", "4xlarge", "9xlarge")),
    *(f"t3.{size}" for size in ("medium", "large", "xlarge", "2xlarge")),
    "c7i-flex.large", "c7i-flex.xlarge", "c7i.12xlarge", "c8i.2xlarge", "c8i.16xlarge",
    "c8i.24xlarge", "m6id.large", "m6id.4xlarge", "m6id.8xlarge", "m8i-flex.12xlarge",
    # GPUs: T4, A10G, L4, V100, A100, H100, H200.
    *(f"g4dn.{size}" for size in ("xlarge", "2xlarge", "4xlarge", "12xlarge")),
    *(f"g5.{size}" for size in ("xlarge", "2xlarge", "4xlarge", "12xlarge", "48xlarge")),
    *(f"g6.{size}" for size in ("xlarge", "2xlarge", "12xlarge")),
    "p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge",
    "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
}
AWS_ZONE_NAMES = {
    "use1-az6": "us-east-1a", "use1-az1": "us-east-1b", "use1-az2": "us-east-1c",
    "use1-az4": "us-east-1d", "use1-az3": "us-east-1e", "use1-az5": "us-east-1f",
    "use2-az1": "us-east-2a", "use2-az2": "us-east-2b", "use2-az3": "us-east-2c",
    "usw2-az2": "us-west-2a", "usw2-az1": "us-west-2b", "usw2-az3": "us-west-2c",
    "usw2-az4": "us-west-2d",
    "euw1-az3": "eu-west-1a", "euw1-az1": "eu-west-1b", "euw1-az2": "eu-west-1c",
    "euc1-az1": "eu-central-1a", "euc1-az2": "eu-central-1b", "euc1-az3": "eu-central-1c",
    "apne1-az4": "ap-northeast-1a", "apne1-az1": "ap-northeast-1c",
    "apne1-az2": "ap-northeast-1d",
    "aps1-az1": "ap-south-1a", "aps1-az3": "ap-south-1b", "aps1-az2": "ap-south-1c",
}

GCP_REGIONS = {
    "us-central1", "us-east1", "us-east4", "us-west1", "us-west4", "europe-west1",
    "europe-west4", "asia-east1", "asia-northeast1", "asia-southeast1",
}
GCP_CPU_TYPES = {
    *(f"e2-standard-{n}" for n in (2, 4, 8, 16, 32)),
    *(f"n2-standard-{n}" for n in (2, 4, 8, 16, 32, 64)),
    *(f"n2-highmem-{n}" for n in (2, 4, 8, 16, 32)),
}
# Machine types whose GPUs are part of the type.
GCP_GPU_TYPES: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-ultragpu-8g": ("H200", 8),
    **{f"g2-standard-{n}": ("L4", 1) for n in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2),
    "g2-standard-48": ("L4", 4),
    "g2-standard-96": ("L4", 8),
}
# GPUs attached to an N1 host: 8 vCPUs (n1-highmem) per GPU, as SkyPilot's default hosts.
GCP_ATTACHED_GPUS = {"T4", "V100"}
GCP_N1_HOST = {1: "n1-highmem-8", 2: "n1-highmem-16", 4: "n1-highmem-32", 8: "n1-highmem-64"}

AZURE_REGIONS = {
    "eastus", "eastus2", "centralus", "southcentralus", "westus2", "westus3", "westeurope",
    "northeurope", "uksouth", "swedencentral", "japaneast", "southeastasia",
}
AZURE_INSTANCE_TYPES = {
    *(f"Standard_D{n}s_v5" for n in (2, 4, 8, 16, 32, 64)),
    *(f"Standard_E{n}s_v5" for n in (2, 4, 8, 16, 32)),
    *(f"Standard_F{n}s_v2" for n in (2, 4, 8, 16, 32)),
    *(f"Standard_NC{n}as_T4_v3" for n in (4, 8, 16, 64)),
    *(f"Standard_NC{n}s_v3" for n in (6, 12, 24)),
    *(f"Standard_NC{n}ads_A100_v4" for n in (24, 48, 96)),
    "Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4", "Standard_NC40ads_H100_v5",
    "Standard_NC80adis_H100_v5", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5",
    "Standard_NV36ads_A10_v5", "Standard_NV72ads_A10_v5",
}


def _read(path: Path) -> Iterator[Row]:
    with path.open(newline="") as handle:
        yield from csv.DictReader(handle)


def _money(value: float | None) -> str:
    return "" if value is None else f"{value:.5f}".rstrip("0").rstrip(".")


def _price(text: str | None) -> float | None:
    return float(text) if text else None


def _count(text: str | None) -> str:
    return str(int(float(text))) if text else ""


def _out(itype: str, acc: str, count: str, vcpus: str, mem: str, price: float | None,
         spot: float | None, region: str, zone: str) -> list[str]:
    return [itype, acc, count, f"{float(vcpus):g}", f"{float(mem):g}", _money(price),
            _money(spot), region, zone]


def curate_aws(rows: Iterable[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        zone = AWS_ZONE_NAMES.get(r["AvailabilityZone"])
        if r["InstanceType"] not in AWS_INSTANCE_TYPES or zone is None or not r["Price"]:
            continue
        out.append(_out(r["InstanceType"], r["AcceleratorName"], _count(r["AcceleratorCount"]),
                        r["vCPUs"], r["MemoryGiB"], _price(r["Price"]), _price(r["SpotPrice"]),
                        r["Region"], zone))
    return out


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def curate_gcp(rows: Iterable[Row]) -> list[list[str]]:
    vms: dict[tuple[str, str], Row] = {}
    gpus: dict[tuple[str, int, str], Row] = {}
    for r in rows:
        if r["Region"] not in GCP_REGIONS or not r["Price"]:
            continue
        if r["InstanceType"]:
            vms[(r["InstanceType"], r["AvailabilityZone"])] = r
        elif r["AcceleratorName"]:
            gpus[(r["AcceleratorName"], int(float(r["AcceleratorCount"])),
                  r["AvailabilityZone"])] = r
    out = []
    for (itype, zone), vm in vms.items():
        if itype in GCP_CPU_TYPES:
            out.append(_out(itype, "", "", vm["vCPUs"], vm["MemoryGiB"], _price(vm["Price"]),
                            _price(vm["SpotPrice"]), vm["Region"], zone))
        if itype in GCP_GPU_TYPES:
            name, count = GCP_GPU_TYPES[itype]
            gpu = gpus.get((name, count, zone))
            if gpu is not None:
                out.append(_gpu_row(itype, vm, gpu, name, count, zone))
    for (name, count, zone), gpu in gpus.items():
        host = GCP_N1_HOST.get(count)
        if name in GCP_ATTACHED_GPUS and host and (host, zone) in vms:
            out.append(_gpu_row(host, vms[(host, zone)], gpu, name, count, zone))
    return out


def _gpu_row(itype: str, vm: Row, gpu: Row, name: str, count: int, zone: str) -> list[str]:
    price = _sum(_price(vm["Price"]), _price(gpu["Price"]))
    spot = _sum(_price(vm["SpotPrice"]), _price(gpu["SpotPrice"]))
    return _out(itype, name, str(count), vm["vCPUs"], vm["MemoryGiB"], price, spot,
                vm["Region"], zone)


def curate_azure(rows: Iterable[Row]) -> list[list[str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rows:
        key = (r["InstanceType"], r["Region"])
        if (r["InstanceType"] not in AZURE_INSTANCE_TYPES or r["Region"] not in AZURE_REGIONS
                or not r["Price"] or key in seen):
            continue
        seen.add(key)
        out.append(_out(r["InstanceType"], r["AcceleratorName"], _count(r["AcceleratorCount"]),
                        r["vCPUs"], r["MemoryGiB"], _price(r["Price"]), _price(r["SpotPrice"]),
                        r["Region"], ""))
    return out


CURATORS = {"aws": curate_aws, "gcp": curate_gcp, "azure": curate_azure}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="directory with <cloud>/vms.csv files")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent.parent / "orch/catalog/data")
    parser.add_argument("--date", default=datetime.now(UTC).date().isoformat(),
                        help="the date of the upstream prices (default: today, UTC); "
                             "`orch --version` shows it")
    args = parser.parse_args()
    for cloud, curate in CURATORS.items():
        rows = sorted(curate(_read(args.source / cloud / "vms.csv")),
                      key=lambda r: (r[0], r[1], r[7], r[8]))
        with (args.out / f"{cloud}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(HEADER)
            writer.writerows(rows)
        print(f"{cloud}: {len(rows)} rows")
    (args.out / "catalog.json").write_text(json.dumps({"date": args.date}) + "\n")


if __name__ == "__main__":
    main()
