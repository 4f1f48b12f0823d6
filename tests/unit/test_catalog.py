"""The shipped catalog files, their loader, the accelerator listing and the refresh script."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from orch.catalog import (
    CATALOG_CLOUDS,
    CatalogError,
    CatalogRow,
    catalog_date,
    list_accelerators,
    load_catalog,
)
from orch.catalog.rows import COLUMNS, parse_rows
from scripts import refresh_catalog

DATA = Path(__file__).resolve().parents[2] / "orch" / "catalog" / "data"
GPUS = ["T4", "L4", "A10G", "L40S", "V100", "A100", "A100-80GB", "H100", "H200"]


@pytest.mark.parametrize("cloud", CATALOG_CLOUDS)
def test_each_cloud_loads_typed_rows(cloud):
    catalog = load_catalog(cloud)
    assert len(catalog.rows) > 100
    for row in catalog.rows:
        assert isinstance(row, CatalogRow) and row.cloud == cloud
        assert row.price > 0 and row.vcpus > 0 and row.memory_gib > 0
        assert row.spot_price is None or row.spot_price > 0
        assert (row.accelerator_name is None) == (row.accelerator_count == 0)
        if cloud == "azure":
            assert row.zone is None
        else:
            assert row.zone is not None and row.zone.startswith(row.region)


def test_loading_is_cached():
    assert load_catalog("gcp") is load_catalog("gcp")


def test_unknown_cloud_has_no_catalog():
    with pytest.raises(ValueError, match="no catalog for cloud 'oracle'"):
        load_catalog("oracle")


@pytest.mark.parametrize("cloud", CATALOG_CLOUDS)
def test_indexes_match_the_rows(cloud):
    catalog = load_catalog(cloud)
    assert catalog.instance_types == {r.instance_type for r in catalog.rows}
    assert catalog.accelerator_names == {r.accelerator_name for r in catalog.rows
                                         if r.accelerator_name}
    for row in catalog.rows:
        assert (row.zone in catalog.zones_by_region[row.region]) or row.zone is None


@pytest.mark.parametrize("gpu", GPUS)
def test_the_gpus_people_ask_for_are_offered_in_at_least_five_regions(gpu):
    regions = {(r.cloud, r.region) for cloud in CATALOG_CLOUDS for r in load_catalog(cloud).rows
               if r.accelerator_name == gpu}
    assert len(regions) >= 5, regions


@pytest.mark.parametrize("cloud", CATALOG_CLOUDS)
def test_cpu_families_cover_common_sizes(cloud):
    sizes = {r.vcpus for r in load_catalog(cloud).rows if r.accelerator_name is None}
    assert {2, 4, 8, 16, 32, 64} <= sizes


@pytest.mark.parametrize("cloud", CATALOG_CLOUDS)
def test_files_are_in_the_documented_format_and_sorted(cloud):
    with (DATA / f"{cloud}.csv").open(newline="") as handle:
        lines = list(csv.reader(handle))
    assert tuple(lines[0]) == COLUMNS
    keys = [(line[0], line[1], int(line[2] or 0), line[7], line[8]) for line in lines[1:]]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


def test_sources_are_recorded():
    sources = (DATA / "SOURCES.md").read_text()
    for cloud in CATALOG_CLOUDS:
        assert f"`{cloud}.csv`" in sources
    assert "anycloud-sh/catalog" in sources


def _lines(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_parse_rows_reads_empty_fields_as_none():
    text = (",".join(COLUMNS) + "\n"
            "m6id.large,,,2,8,0.11865,,us-east-1,us-east-1a\n"
            "Standard_NC6s_v3,V100,1,6,112,3.06,0.6,eastus,\n")
    cpu, gpu = parse_rows("x", "test.csv", _lines(text))
    assert cpu.accelerator_name is None and cpu.accelerator_count == 0
    assert cpu.spot_price is None and cpu.price_for(False) == 0.11865
    assert cpu.price_for(True) is None
    assert gpu.zone is None and gpu.accelerator_count == 1 and gpu.price_for(True) == 0.6


def test_parse_rows_names_the_line_of_a_bad_value():
    text = ",".join(COLUMNS) + "\nm6id.large,,,two,8,0.1,,us-east-1,us-east-1a\n"
    with pytest.raises(CatalogError, match=r"test.csv:2: could not convert"):
        list(parse_rows("aws", "test.csv", _lines(text)))


def test_parse_rows_rejects_another_header():
    with pytest.raises(CatalogError, match="expected the header"):
        list(parse_rows("aws", "test.csv", _lines("InstanceType,Price\nm6id.large,0.1\n")))


def test_list_accelerators_filters_case_insensitively_and_pins_counts():
    offers = list_accelerators("a100")
    assert {o.accelerator for o in offers} == {"A100", "A100-80GB"}
    eight = list_accelerators("A100:8")
    assert eight and all(o.count == 8 for o in eight)
    assert [(o.accelerator, o.count, o.price) for o in offers] == sorted(
        (o.accelerator, o.count, o.price) for o in offers)


def test_list_accelerators_reports_the_cheapest_zone_of_each_region():
    offers = {(o.cloud, o.region, o.instance_type): o for o in list_accelerators("T4")}
    for (cloud, region, itype), offer in offers.items():
        rows = [r for r in load_catalog(cloud).rows
                if (r.region, r.instance_type, r.accelerator_name) == (region, itype, "T4")
                and r.accelerator_count == offer.count]
        assert offer.price == min(r.price for r in rows)
        spots = [r.spot_price for r in rows if r.spot_price is not None]
        assert offer.spot_price == (min(spots) if spots else None)
    listed = {key for key in offers if not (key[0] == "gcp" and key[2].startswith("n1-"))}
    assert listed == {(r.cloud, r.region, r.instance_type) for c in CATALOG_CLOUDS
                      for r in load_catalog(c).rows if r.accelerator_name == "T4"
                      and not (r.cloud == "gcp" and r.instance_type.startswith("n1-"))}


def test_gcp_gpus_on_n1_hosts_are_listed_on_skypilots_default_host():
    # T4:1 -> at least 4 vCPUs and 16 GiB (SkyPilot's _NUM_ACC_TO_NUM_CPU); the catalog
    # also holds the smaller and bigger hosts a task may size.
    t4 = [r for r in load_catalog("gcp").accelerator_rows[("T4", 1)]]
    assert min(r.vcpus for r in t4) < 4 < max(r.vcpus for r in t4)
    offers = [o for o in list_accelerators("T4:1", clouds=["gcp"])]
    assert offers and all(o.vcpus >= 4 and o.memory_gib >= 16 for o in offers)
    for offer in offers:
        fitting = [r.price for r in t4 if r.region == offer.region
                   and r.vcpus >= 4 and r.memory_gib >= 16]
        assert offer.price == min(fitting)


def test_list_accelerators_spot_price_skips_zones_without_spot():
    (p5,) = [o for o in list_accelerators("H100:1", clouds=["aws"]) if o.region == "us-east-2"]
    zones = [r for r in load_catalog("aws").rows
             if (r.instance_type, r.region) == ("p5.4xlarge", "us-east-2")]
    assert any(r.spot_price is None for r in zones)
    assert p5.spot_price == min(r.spot_price for r in zones if r.spot_price is not None)
    assert list_accelerators("nothing-like-this") == []


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


SKY = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
       "Price", "SpotPrice", "Region", "AvailabilityZone"]


def test_refresh_script_maps_aws_zone_ids_to_names_and_drops_local_zones(tmp_path):
    _write(tmp_path / "aws/vms.csv", SKY, [
        ["p4d.24xlarge", "A100", "8.0", "96.0", "1152.0", "{}", "21.95764", "6.8507",
         "us-east-1", "use1-az1"],
        ["p4d.24xlarge", "A100", "8.0", "96.0", "1152.0", "{}", "21.95764", "7.1",
         "us-east-1", "use1-atl2-az1"],
        ["x1.large", "", "", "2.0", "8.0", "", "0.1", "", "us-east-1", "use1-az1"],
    ])
    rows = refresh_catalog.curate_aws(refresh_catalog._read(tmp_path / "aws/vms.csv"))
    assert rows == [["p4d.24xlarge", "A100", "8", "96", "1152", "21.95764", "6.8507",
                     "us-east-1", "us-east-1b"]]


def test_refresh_script_prices_gcp_gpus_as_machine_plus_gpu(tmp_path):
    _write(tmp_path / "gcp/vms.csv", SKY, [
        ["a2-highgpu-1g", "", "", "12.0", "85.0", "", "0.73948", "0.36975", "us-central1",
         "us-central1-a"],
        ["n1-highmem-8", "", "", "8.0", "52.0", "", "0.47321", "0.17276", "us-central1",
         "us-central1-a"],
        ["", "A100", "1", "", "", "", "2.93391", "1.4341", "us-central1", "us-central1-a"],
        ["", "T4", "1", "", "", "", "0.35", "", "us-central1", "us-central1-a"],
        ["n2-standard-4", "", "", "4.0", "16.0", "", "0.19424", "0.06284", "mars-north1",
         "mars-north1-a"],
    ])
    rows = refresh_catalog.curate_gcp(refresh_catalog._read(tmp_path / "gcp/vms.csv"))
    # Every region is kept; a machine type with built-in GPUs is never a CPU-only row, an N1
    # host is (and, summed with each GPU it can attach, a GPU row); sums keep every digit.
    assert sorted(rows) == [
        ["a2-highgpu-1g", "A100", "1", "12", "85", "3.67339", "1.80385", "us-central1",
         "us-central1-a"],
        ["n1-highmem-8", "", "", "8", "52", "0.47321", "0.17276", "us-central1",
         "us-central1-a"],
        ["n1-highmem-8", "T4", "1", "8", "52", "0.82321", "", "us-central1", "us-central1-a"],
        ["n2-standard-4", "", "", "4", "16", "0.19424", "0.06284", "mars-north1",
         "mars-north1-a"],
    ]


def test_refresh_script_keeps_one_azure_row_per_region(tmp_path):
    azure = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
             "GpuInfo", "Price", "SpotPrice", "Region", "Generation"]
    _write(tmp_path / "azure/vms.csv", azure, [
        ["Standard_D4s_v5", "", "", "4", "16", "", "0.192", "0.04072", "eastus", "V1"],
        ["Standard_D4s_v5", "", "", "4", "16", "", "0.192", "0.04072", "eastus", "V2"],
        ["Standard_D4s_v5", "", "", "4", "16", "", "0.2", "", "brazilsouth", "V2"],
    ])
    rows = refresh_catalog.curate_azure(refresh_catalog._read(tmp_path / "azure/vms.csv"))
    assert rows == [["Standard_D4s_v5", "", "", "4", "16", "0.192", "0.04072", "eastus", ""],
                    ["Standard_D4s_v5", "", "", "4", "16", "0.2", "", "brazilsouth", ""]]


def test_the_refresh_script_records_the_catalog_date_that_orch_reports(tmp_path, monkeypatch):
    for cloud in CATALOG_CLOUDS:
        _write(tmp_path / "src" / cloud / "vms.csv", SKY, [
            ["m6i.large", "", "", "2.0", "8.0", "", "0.096", "0.04", "us-east-1", "use1-az6"]])
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr("sys.argv", ["refresh_catalog", str(tmp_path / "src"), "--out", str(out),
                                     "--date", "2031-02-03"])
    refresh_catalog.main()
    assert json.loads((out / "catalog.json").read_text()) == {"date": "2031-02-03"}
    assert (out / "aws.csv").read_text().splitlines()[1].startswith("m6i.large,")
    # The shipped file is what `orch --version` shows.
    shipped = json.loads((DATA / "catalog.json").read_text())["date"]
    assert catalog_date() == shipped and re.fullmatch(r"\d{4}-\d{2}-\d{2}", shipped)


def test_prices_keep_the_source_precision(tmp_path):
    # Six decimals upstream stay six; sums are exact (no float noise, no rounding to 5).
    _write(tmp_path / "gcp/vms.csv", SKY, [
        ["n1-highmem-4", "", "", "4.0", "26.0", "", "0.236606", "0.0500015", "us-east1",
         "us-east1-b"],
        ["", "T4", "1", "", "", "", "0.35", "0.14", "us-east1", "us-east1-b"],
    ])
    rows = refresh_catalog.curate_gcp(refresh_catalog._read(tmp_path / "gcp/vms.csv"))
    assert sorted((r[1], r[5], r[6]) for r in rows) == [
        ("", "0.236606", "0.0500015"), ("T4", "0.586606", "0.1900015")]
    shipped = [r.spot_price for r in load_catalog("azure").default_cpu_rows if r.spot_price]
    assert any(len(repr(p).split(".")[1]) > 5 for p in shipped)


def test_refresh_round_trip_regenerates_the_files_it_wrote(tmp_path):
    """Curating a fixture, writing it, and loading it gives back the fixture's facts."""
    for cloud, rows in {
        "aws": [["m7i.xlarge", "", "", "4.0", "16.0", "", "0.2016", "0.0914", "eu-west-1",
                 "euw1-az3"],
                ["g6e.xlarge", "L40S", "1.0", "4.0", "32.0", "{}", "1.861", "0.74652",
                 "us-east-1", "use1-az4"],
                ["m7i.metal-24xl", "", "", "96.0", "384.0", "", "4.8", "", "us-east-1",
                 "use1-az4"]],
        "gcp": [["n4-standard-8", "", "", "8.0", "32.0", "", "0.37808", "0.1484",
                 "us-central1", "us-central1-a"]],
        "azure": [["Standard_E8s_v5", "", "", "8", "64", "", "0.504", "0.0605",
                   "westeurope", "V2"]],
    }.items():
        _write(tmp_path / "src" / cloud / "vms.csv", SKY, rows)
    out = tmp_path / "out"
    out.mkdir()
    counts = refresh_catalog.refresh(tmp_path / "src", out, "2031-02-03")
    assert counts == {"aws": 2, "gcp": 1, "azure": 1}  # bare metal is left out
    from orch.catalog.loader import CloudCatalog

    aws = CloudCatalog.of_text("aws", "aws.csv", (out / "aws.csv").read_text())
    (g6e,) = aws.rows_of_type("g6e.xlarge")
    assert (g6e.accelerator_name, g6e.accelerator_count, g6e.zone) == ("L40S", 1, "us-east-1d")
    assert (g6e.price, g6e.spot_price) == (1.861, 0.74652)
    assert [r.instance_type for r in aws.default_cpu_rows] == ["m7i.xlarge"]
    assert aws.zones_by_region == {"eu-west-1": {"eu-west-1a"}, "us-east-1": {"us-east-1d"}}
    again = tmp_path / "again"
    again.mkdir()
    refresh_catalog.refresh(tmp_path / "src", again, "2031-02-03")
    assert all((out / f).read_text() == (again / f).read_text()
               for f in ("aws.csv", "gcp.csv", "azure.csv", "catalog.json"))
