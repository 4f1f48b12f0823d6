"""Regenerate orch's catalog (orch/catalog/data/*.csv) from SkyPilot-format CSVs.

Usage::

    python scripts/refresh_catalog.py SOURCE_DIR [--out orch/catalog/data] [--date YYYY-MM-DD]

``SOURCE_DIR`` holds ``aws/vms.csv``, ``gcp/vms.csv`` and ``azure/vms.csv`` in SkyPilot's
catalog format, e.g. a checkout of https://github.com/anycloud-sh/catalog; a cloud whose
file is missing keeps its CSV. GCP and Azure are kept whole (every region and machine
family); AWS keeps the families of :data:`AWS_FAMILY` in the commercial regions. Prices
keep every digit of the source (Decimal, no rounding). Per cloud:

* AWS lists offerings by availability-zone *ID* (``use1-az6``); EC2 calls take zone *names*
  (``us-east-1a``), and the ID-to-name mapping differs between accounts. We translate with one
  real account's mapping (the one moto also uses), so the names are real zones; in another
  account a zone may be aliased differently, which costs at most one failed zone in failover.
  Local Zones (``use1-atl2-az1``) are left out.
* GCP prices a machine type's vCPUs/memory and its GPUs separately (GPU rows have no machine
  type). A GPU machine type (``a2-highgpu-1g``) is priced as the sum of the two in the same
  zone; a GPU GCP attaches to an N1 host (T4, V100, P100, P4) gets one row per N1 host it
  may attach to (GCP's size limit per GPU count), the optimizer picks SkyPilot's default
  host among them. TPUs are left out.
* Azure's file has no zones: rows are per region (``AvailabilityZone`` stays empty);
  fractional-GPU sizes are left out.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from orch.catalog.families import GCP_HOST_FAMILIES, GCP_HOST_MAX

HEADER = [
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
    "Price", "SpotPrice", "Region", "AvailabilityZone",
]

Row = dict[str, str]

# AWS families kept: general-purpose, compute and memory optimised families (5th to 8th
# generation, any processor letter, flex and local-disk variants), t3, and the GPU and ML
# accelerator families. Bare-metal sizes are left out (orch provisions VMs).
AWS_FAMILY = re.compile(
    r"^(?:[mcr][5678][a-z]*(?:-flex)?|t3|g4dn|g5|g6|g6e|p3|p3dn|p4d|p4de|p5|p5e|p5en|inf2|trn1"
    r"|trn1n)\.(?!metal)")
# Zone ID -> zone letter per region: one real account's mapping, the one moto uses
# (moto.ec2.models.availability_zones_and_regions); commercial regions only.
AWS_ZONE_LETTERS: dict[str, dict[str, str]] = {
    "af-south-1": {"afs1-az1": "a", "afs1-az2": "b", "afs1-az3": "c"},
    "ap-east-1": {"ape1-az1": "a", "ape1-az2": "b", "ape1-az3": "c"},
    "ap-east-2": {"ape2-az1": "a", "ape2-az2": "b", "ape2-az3": "c"},
    "ap-northeast-1": {"apne1-az4": "a", "apne1-az1": "c", "apne1-az2": "d"},
    "ap-northeast-2": {"apne2-az1": "a", "apne2-az2": "b", "apne2-az3": "c", "apne2-az4": "d"},
    "ap-northeast-3": {"apne3-az1": "a", "apne3-az2": "b", "apne3-az3": "c"},
    "ap-south-1": {"aps1-az1": "a", "aps1-az3": "b", "aps1-az2": "c"},
    "ap-south-2": {"aps2-az1": "a", "aps2-az2": "b", "aps2-az3": "c"},
    "ap-southeast-1": {"apse1-az1": "a", "apse1-az2": "b", "apse1-az3": "c"},
    "ap-southeast-2": {"apse2-az1": "a", "apse2-az3": "b", "apse2-az2": "c"},
    "ap-southeast-3": {"apse3-az1": "a", "apse3-az2": "b", "apse3-az3": "c"},
    "ap-southeast-4": {"apse4-az1": "a", "apse4-az2": "b", "apse4-az3": "c"},
    "ap-southeast-5": {"apse5-az1": "a", "apse5-az2": "b", "apse5-az3": "c"},
    "ap-southeast-6": {"apse6-az1": "a", "apse6-az2": "b", "apse6-az3": "c"},
    "ap-southeast-7": {"apse7-az1": "a", "apse7-az2": "b", "apse7-az3": "c"},
    "ca-central-1": {"cac1-az1": "a", "cac1-az2": "b", "cac1-az4": "d"},
    "ca-west-1": {"caw1-az1": "a", "caw1-az2": "b", "caw1-az3": "c"},
    "eu-central-1": {"euc1-az1": "a", "euc1-az2": "b", "euc1-az3": "c"},
    "eu-central-2": {"euc2-az1": "a", "euc2-az2": "b", "euc2-az3": "c"},
    "eu-north-1": {"eun1-az1": "a", "eun1-az2": "b", "eun1-az3": "c"},
    "eu-south-1": {"eus1-az1": "a", "eus1-az2": "b", "eus1-az3": "c"},
    "eu-south-2": {"eus2-az1": "a", "eus2-az2": "b", "eus2-az3": "c"},
    "eu-west-1": {"euw1-az3": "a", "euw1-az1": "b", "euw1-az2": "c"},
    "eu-west-2": {"euw2-az2": "a", "euw2-az3": "b", "euw2-az1": "c"},
    "eu-west-3": {"euw3-az1": "a", "euw3-az2": "b", "euw3-az3": "c"},
    "il-central-1": {"ilc1-az1": "a", "ilc1-az2": "b", "ilc1-az3": "c"},
    "me-central-1": {"mec1-az1": "a", "mec1-az2": "b", "mec1-az3": "c"},
    "me-south-1": {"mes1-az1": "a", "mes1-az2": "b", "mes1-az3": "c"},
    "mx-central-1": {"mxc1-az1": "a", "mxc1-az2": "b", "mxc1-az3": "c"},
    "sa-east-1": {"sae1-az1": "a", "sae1-az2": "b", "sae1-az3": "c"},
    "us-east-1": {"use1-az6": "a", "use1-az1": "b", "use1-az2": "c", "use1-az4": "d",
                  "use1-az3": "e", "use1-az5": "f"},
    "us-east-2": {"use2-az1": "a", "use2-az2": "b", "use2-az3": "c"},
    "us-west-1": {"usw1-az3": "a", "usw1-az1": "b"},
    "us-west-2": {"usw2-az2": "a", "usw2-az1": "b", "usw2-az3": "c", "usw2-az4": "d"},
}
AWS_ZONE_NAMES = {zone_id: region + letter for region, ids in AWS_ZONE_LETTERS.items()
                  for zone_id, letter in ids.items()}

# GCP machine types whose GPUs are part of the type (SkyPilot's gcp_catalog mapping).
GCP_GPU_TYPES: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8),
    "a4-highgpu-8g": ("B200", 8),
    **{f"g2-standard-{n}": ("L4", 1) for n in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2),
    "g2-standard-48": ("L4", 4),
    "g2-standard-96": ("L4", 8),
}
# Families with built-in GPUs: never offered as CPU-only types (their price excludes GPUs).
GCP_GPU_FAMILIES = ("a2-", "a3-", "a4-", "g2-", "g4-")


def _read(path: Path) -> Iterator[Row]:
    with path.open(newline="") as handle:
        yield from csv.DictReader(handle)


def _money(value: Decimal | None) -> str:
    """A price as the source wrote it (Decimal keeps every digit; no rounding, no float
    noise such as 0.30000000000000004 in sums)."""
    if value is None:
        return ""
    text = format(value.normalize(), "f")
    return text


def _price(text: str | None) -> Decimal | None:
    return Decimal(text) if text else None


def _accelerator(r: Row) -> tuple[str, str]:
    """Name and count; a count without a name (Azure's FPGA sizes) is no accelerator."""
    name, count = r["AcceleratorName"], r["AcceleratorCount"]
    return (name, str(int(float(count)))) if name and count else ("", "")


def _whole(text: str | None) -> bool:
    """An accelerator count orch can ask for (fractional GPUs are left out)."""
    return not text or float(text).is_integer()


def _out(itype: str, acc: str, count: str, vcpus: str, mem: str, price: Decimal | None,
         spot: Decimal | None, region: str, zone: str) -> list[str]:
    return [itype, acc, count, f"{float(vcpus):g}", f"{float(mem):g}", _money(price),
            _money(spot), region, zone]


def curate_aws(rows: Iterable[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        zone = AWS_ZONE_NAMES.get(r["AvailabilityZone"])
        if (not AWS_FAMILY.match(r["InstanceType"]) or zone is None or not r["Price"]
                or not _whole(r["AcceleratorCount"])):
            continue
        out.append(_out(r["InstanceType"], *_accelerator(r), r["vCPUs"], r["MemoryGiB"],
                        _price(r["Price"]), _price(r["SpotPrice"]),
                        r["Region"], zone))
    return out


def _sum(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    return None if a is None or b is None else a + b


def curate_gcp(rows: Iterable[Row]) -> list[list[str]]:
    vms: dict[tuple[str, str], Row] = {}
    gpus: dict[tuple[str, int, str], Row] = {}
    for r in rows:
        if not r["Price"]:
            continue
        if r["InstanceType"]:
            vms[(r["InstanceType"], r["AvailabilityZone"])] = r
        elif r["AcceleratorName"] and not r["AcceleratorName"].startswith("tpu-"):
            gpus[(r["AcceleratorName"], int(float(r["AcceleratorCount"])),
                  r["AvailabilityZone"])] = r
    out = []
    for (itype, zone), vm in vms.items():
        if itype in GCP_GPU_TYPES:
            name, count = GCP_GPU_TYPES[itype]
            gpu = gpus.get((name, count, zone))
            if gpu is not None:
                out.append(_gpu_row(itype, vm, gpu, name, count, zone))
        elif not itype.startswith(GCP_GPU_FAMILIES) and "tpu" not in itype:
            out.append(_out(itype, "", "", vm["vCPUs"], vm["MemoryGiB"], _price(vm["Price"]),
                            _price(vm["SpotPrice"]), vm["Region"], zone))
    hosts = _n1_hosts(vms)
    built_in = {name for name, _ in GCP_GPU_TYPES.values()}
    for (name, count, zone), gpu in gpus.items():
        if name not in built_in:
            out += [_gpu_row(h["InstanceType"], h, gpu, name, count, zone)
                    for h in _hosts_for(hosts.get(zone, []), name, count)]
    return out


def _n1_hosts(vms: dict[tuple[str, str], Row]) -> dict[str, list[Row]]:
    hosts: dict[str, list[Row]] = {}
    for (itype, zone), vm in vms.items():
        if itype.startswith(GCP_HOST_FAMILIES):
            hosts.setdefault(zone, []).append(vm)
    return hosts


def _hosts_for(hosts: list[Row], name: str, count: int) -> list[Row]:
    """The N1 hosts ``count`` GPUs ``name`` can attach to (within GCP's size limit); the
    optimizer picks SkyPilot's default among them when the task sizes nothing."""
    if name not in GCP_HOST_MAX or count not in GCP_HOST_MAX[name]:
        return []
    most_cpus, most_memory = GCP_HOST_MAX[name][count]
    return [h for h in hosts
            if float(h["vCPUs"]) <= most_cpus and float(h["MemoryGiB"]) <= most_memory]


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
        if not r["Price"] or key in seen or not _whole(r["AcceleratorCount"]):
            continue
        seen.add(key)
        out.append(_out(r["InstanceType"], *_accelerator(r), r["vCPUs"], r["MemoryGiB"],
                        _price(r["Price"]), _price(r["SpotPrice"]),
                        r["Region"], ""))
    return out


def _sort_key(row: list[str]) -> tuple[str, str, int, str, str]:
    """Instance type first (the loader finds a type's rows by bisection), then accelerator,
    count, region and zone: one N1 host carries several GPU counts in one zone."""
    return (row[0], row[1], int(row[2] or 0), row[7], row[8])


CURATORS = {"aws": curate_aws, "gcp": curate_gcp, "azure": curate_azure}


def refresh(source: Path, out: Path, date: str) -> dict[str, int]:
    """Rewrite ``out/<cloud>.csv`` for every cloud whose ``source/<cloud>/vms.csv`` exists
    (a cloud without one keeps its file: the AWS source is too large for some checkouts),
    then the date file and the compact cache (:mod:`orch.catalog.compact`)."""
    counts = {}
    for cloud, curate in CURATORS.items():
        path = source / cloud / "vms.csv"
        if not path.exists():
            print(f"{cloud}: no {path}, {cloud}.csv kept as it is")
            continue
        rows = sorted(curate(_read(path)), key=_sort_key)
        with (out / f"{cloud}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(HEADER)
            writer.writerows(rows)
        counts[cloud] = len(rows)
        print(f"{cloud}: {len(rows)} rows")
    (out / "catalog.json").write_text(json.dumps({"date": date}) + "\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="directory with <cloud>/vms.csv files")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent.parent / "orch/catalog/data")
    parser.add_argument("--date", default=datetime.now(UTC).date().isoformat(),
                        help="the date of the upstream prices (default: today, UTC); "
                             "`orch --version` shows it")
    args = parser.parse_args()
    refresh(args.source, args.out, args.date)


if __name__ == "__main__":
    main()
