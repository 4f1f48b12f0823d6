"""The optimizer against the shipped catalog: filters, sorting, alternatives, local, errors.

Expected values are computed from the catalog rows directly, so the tests keep holding when
the catalog is refreshed.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orch import optimizer
from orch.catalog import CATALOG_CLOUDS, CatalogRow, load_catalog
from orch.clouds.errors import BlockScope
from orch.failover_rules import BlockEntry, Blocklist, block_entry
from orch.optimizer import (
    Candidate,
    HostResources,
    InfeasibleResourcesError,
    OptimizerError,
    UnknownResourceError,
    plan,
)
from orch.spec import Task

SMALL_HOST = HostResources(cpus=2, memory_gb=4.0)
BIG_HOST = HostResources(cpus=64, memory_gb=256.0)


def task(num_nodes: int = 1, **resources: Any) -> Task:
    return Task.model_validate({"num_nodes": num_nodes, "resources": resources})


def rows(cloud: str | None = None) -> list[CatalogRow]:
    return [r for c in ([cloud] if cloud else CATALOG_CLOUDS) for r in load_catalog(c).rows]


def prices(candidates: list[Candidate]) -> list[float]:
    return [c.price_per_hour for c in candidates]


# --- sorting and prices -------------------------------------------------------------------

def test_candidates_are_sorted_cheapest_first():
    found = plan(task(accelerators="A100:8"), host=SMALL_HOST)
    assert prices(found) == sorted(prices(found))
    assert len({(c.cloud, c.region, c.instance_type) for c in found}) == len(found)


def test_price_covers_all_nodes_and_is_the_cheapest_zone():
    found = plan(task(num_nodes=3, cloud="aws", accelerators="H100:8"), host=SMALL_HOST)
    for c in found:
        zone_prices = [r.price for r in rows("aws") if (r.region, r.instance_type)
                       == (c.region, c.instance_type)]
        assert c.price_per_node == min(zone_prices)
        assert c.price_per_hour == pytest.approx(3 * c.price_per_node)
        assert c.num_nodes == 3


def _cheapest_by_zone(fitting: list[CatalogRow], spot: bool) -> dict[tuple[str, Any], Any]:
    best: dict[tuple[str, Any], Any] = {}
    for r in fitting:
        price = r.price_for(spot)
        if price is not None:
            key = (r.region, r.zone)
            best[key] = min(best.get(key, (price, r.instance_type)), (price, r.instance_type))
    return best


def test_each_zone_offers_its_cheapest_fitting_type_zones_ordered_by_price():
    found = plan(task(cloud="aws", accelerators="T4", use_spot=True), host=SMALL_HOST)
    t4 = [r for r in rows("aws") if (r.accelerator_name, r.accelerator_count) == ("T4", 1)]
    best = _cheapest_by_zone(t4, spot=True)
    listed = [(c.region, z) for c in found for z in c.zones]
    assert sorted(listed) == sorted(best)  # every zone once, with its cheapest type
    for c in found:
        spot = {r.zone: r.spot_price for r in t4 if r.spot_price is not None
                and (r.region, r.instance_type) == (c.region, c.instance_type)}
        assert all(best[(c.region, z)] == (spot[z], c.instance_type) for z in c.zones)
        assert [spot[z] for z in c.zones] == sorted(spot[z] for z in c.zones)


def test_candidates_carry_the_instance_shape():
    (first, *_) = plan(task(cloud="gcp", instance_type="n2-standard-8"), host=SMALL_HOST)
    assert (first.instance_type, first.cpus, first.memory_gb, first.accelerators) == (
        "n2-standard-8", 8, 32, None)
    with pytest.raises(ValidationError):
        first.price_per_hour = 0  # type: ignore[misc]


# --- the local cloud ----------------------------------------------------------------------

def test_local_is_free_and_first_when_it_fits():
    found = plan(task(num_nodes=2, cpus=2), host=SMALL_HOST)
    assert found[0] == Candidate(cloud="local", region="local", num_nodes=2, cpus=2.0)
    assert found[0].price_per_hour == 0 and found[0].zones == [] and found[0].instance_type is None
    assert all(c.cloud != "local" for c in found[1:])


def test_a_fresh_machine_with_no_clouds_launches_locally():
    assert plan(task(), enabled_clouds=[], host=SMALL_HOST) == [
        Candidate(cloud="local", region="local")]


@pytest.mark.parametrize(("resources", "reason"), [
    ({"accelerators": "T4"}, "the local cloud has no GPUs"),
    ({"instance_type": "m6id.large"}, "the local cloud has no instance types"),
    ({"cpus": "4"}, "this host has 2 CPUs, fewer than 4"),
    ({"memory": "8+"}, "this host has 4.0 GiB of memory, less than 8"),
    ({"use_spot": True}, "the local cloud has no spot instances"),
])
def test_local_is_infeasible_for_what_this_host_lacks(resources, reason):
    with pytest.raises(InfeasibleResourcesError) as err:
        plan(task(cloud="local", **resources), host=SMALL_HOST)
    assert reason in str(err.value)
    assert all(c.cloud != "local" for c in plan(task(**resources), host=SMALL_HOST))


def test_local_fits_a_bigger_host():
    found = plan(task(cpus="4", memory="8+"), host=BIG_HOST)
    assert found[0].cloud == "local" and (found[0].cpus, found[0].memory_gb) == (4, 8)


def test_local_honours_its_region_and_no_other():
    assert plan(task(cloud="local", region="local"), host=SMALL_HOST)[0].cloud == "local"
    found = plan(task(region="us-east-1"), host=SMALL_HOST)
    assert {c.cloud for c in found} == {"aws"}


def test_the_host_is_detected_when_not_given():
    host = HostResources.detect()
    assert host.cpus >= 1 and host.memory_gb > 0
    found = plan(task(cpus=host.cpus))
    assert found[0].cloud == "local"


# --- cpus, memory ------------------------------------------------------------------------

def test_cpus_n_means_at_least_n_preferring_the_smallest_fit_per_region():
    found = plan(task(cpus="3"), host=SMALL_HOST)
    for c in found:
        fits = [r.vcpus for r in rows(c.cloud) if r.region == c.region
                and r.accelerator_name is None and r.vcpus >= 3]
        assert c.cpus == min(fits)


def test_cpus_n_plus_offers_the_cheapest_fit_of_every_size_per_zone():
    exact = plan(task(cloud="gcp", cpus="4"), host=SMALL_HOST)
    plus = plan(task(cloud="gcp", cpus="4+"), host=SMALL_HOST)
    assert {c.cpus for c in exact} == {4}
    fitting = [r for r in load_catalog("gcp").default_cpu_rows
               if r.vcpus >= 4 and r.memory_gib >= 4 * r.vcpus]
    best = _cheapest_by_zone(fitting, spot=False)
    assert {(c.region, z): (c.price_per_node, c.instance_type) for c in plus
            for z in c.zones} == best
    assert prices(plus)[0] <= prices(exact)[0]


def test_memory_is_a_lower_bound_too():
    found = plan(task(cloud="azure", memory="64+"), host=SMALL_HOST)
    assert found and all(c.memory_gb >= 64 for c in found)
    smallest = plan(task(cloud="azure", cpus="4+", memory="64"), host=SMALL_HOST)
    assert {c.memory_gb for c in smallest} == {64}


def test_default_request_gets_skypilots_default_on_clouds():
    """Nothing sized: SkyPilot's cpus 8+ and memory 4x (4 GiB per vCPU) on every cloud."""
    found = plan(task(), enabled_clouds=["aws"], host=SMALL_HOST)
    assert [c.cloud for c in found[:1]] == ["local"]
    clouds = found[1:]
    assert clouds and all(c.cpus >= 8 and c.memory_gb >= 4 * c.cpus for c in clouds)
    assert clouds[0].cpus == 8
    rows = [r for r in load_catalog("aws").rows if r.accelerator_name is None]
    assert any(r.vcpus >= 8 and r.memory_gib < 4 * r.vcpus for r in rows)  # some left out


def test_memory_ratio_is_per_vcpu_of_each_instance_type():
    found = plan(task(cloud="gcp", cpus="4+", memory="8x"), host=SMALL_HOST)
    assert found and all(c.memory_gb >= 8 * c.cpus for c in found)
    loose = plan(task(cloud="gcp", cpus="4+"), host=SMALL_HOST)
    assert any(c.memory_gb < 8 * c.cpus for c in loose)  # 4 GiB per vCPU is cheaper
    assert prices(loose)[0] < prices(found)[0]


def test_cpu_requests_never_get_gpu_instances():
    assert all(c.accelerators is None for c in plan(task(cpus="8+"), host=SMALL_HOST))


# --- accelerators --------------------------------------------------------------------------

def test_accelerators_match_name_case_insensitively_and_count_exactly():
    found = plan(task(accelerators="a100:8"), host=SMALL_HOST)
    assert found and all(c.accelerators == {"A100": 8} for c in found)
    expected = {(r.cloud, r.region, r.instance_type) for r in rows()
                if r.accelerator_name == "A100" and r.accelerator_count == 8}
    assert {(c.cloud, c.region, c.instance_type) for c in found} == expected


def test_accelerator_with_cpus_filters_the_host_size():
    found = plan(task(cloud="gcp", accelerators="T4:1", cpus="8+"), host=SMALL_HOST)
    assert found and all(c.cpus >= 8 and c.accelerators == {"T4": 1} for c in found)


def test_any_of_merges_alternatives_by_price():
    found = plan(task(any_of=[{"accelerators": "H100:8"}, {"accelerators": "A100:8"}]),
                 host=SMALL_HOST)
    kinds = [next(iter(c.accelerators or {})) for c in found]
    assert {"H100", "A100"} == set(kinds)
    assert prices(found) == sorted(prices(found))
    assert kinds[0] == "A100"  # the cheapest A100:8 is cheaper than any H100:8


def test_ordered_keeps_the_users_preference_before_price():
    found = plan(task(accelerators=["H100:8", "A100:8"]), host=SMALL_HOST)
    kinds = [next(iter(c.accelerators or {})) for c in found]
    first_a100 = kinds.index("A100")
    assert set(kinds[:first_a100]) == {"H100"} and set(kinds[first_a100:]) == {"A100"}
    assert prices(found[:first_a100]) == sorted(prices(found[:first_a100]))


def test_alternatives_inherit_unset_fields_and_are_deduplicated():
    found = plan(task(cloud="aws", use_spot=True,
                      any_of=[{"accelerators": "T4"}, {"accelerators": "T4"}]), host=SMALL_HOST)
    assert found and all(c.use_spot and c.cloud == "aws" for c in found)
    assert len({(c.region, c.instance_type) for c in found}) == len(found)


# --- spot ----------------------------------------------------------------------------------

def test_spot_uses_spot_prices_and_skips_zones_without_a_spot_offer():
    found = plan(task(cloud="aws", region="us-east-1", accelerators="H100:1", use_spot=True),
                 host=SMALL_HOST)
    (c,) = found
    offers = [r for r in rows("aws") if (r.region, r.instance_type) == ("us-east-1", "p5.4xlarge")]
    assert c.use_spot and c.price_per_node == min(r.spot_price for r in offers if r.spot_price)
    assert set(c.zones) == {r.zone for r in offers if r.spot_price is not None}
    assert set(c.zones) < {r.zone for r in offers}


# --- placement --------------------------------------------------------------------------------

def test_cloud_region_zone_and_instance_type_pin_the_candidates():
    found = plan(task(cloud="aws", instance_type="p4d.24xlarge", region="us-west-2"),
                 host=SMALL_HOST)
    assert [(c.cloud, c.region, c.instance_type) for c in found] == [
        ("aws", "us-west-2", "p4d.24xlarge")]
    zoned = plan(task(zone="us-central1-b", cpus="4"), host=SMALL_HOST)
    assert zoned and {(c.cloud, c.region, tuple(c.zones)) for c in zoned} == {
        ("gcp", "us-central1", ("us-central1-b",))}


def test_an_instance_type_alone_finds_its_cloud():
    found = plan(task(instance_type="Standard_ND96isr_H100_v5"), host=SMALL_HOST)
    assert {c.cloud for c in found} == {"azure"}
    assert all(c.accelerators == {"H100": 8} for c in found)


def test_enabled_clouds_limit_the_search():
    found = plan(task(accelerators="A100:8"), enabled_clouds=["GCP"], host=SMALL_HOST)
    assert {c.cloud for c in found} == {"gcp"}


# --- blocklist ------------------------------------------------------------------------------

def test_blocked_zones_leave_the_candidate_and_then_drop_it():
    request = task(cloud="aws", region="us-east-1", accelerators="A100:8")
    (c,) = plan(request, host=SMALL_HOST)
    blocked = Blocklist()
    for zone in c.zones[:-1]:
        blocked = blocked.add(block_entry(c, "CapacityError", BlockScope.ZONE, zone))
        (again,) = plan(request, blocklist=blocked, host=SMALL_HOST)
        assert zone not in again.zones
    blocked = blocked.add(block_entry(c, "CapacityError", BlockScope.ZONE, c.zones[-1]))
    with pytest.raises(InfeasibleResourcesError, match="blocked by earlier failures"):
        plan(request, blocklist=blocked, host=SMALL_HOST)


def test_a_zone_block_is_specific_to_the_instance_type_and_pricing():
    blocked = Blocklist(entries=[BlockEntry(cloud="aws", region="us-east-1", zone="us-east-1c",
                                            instance_type="p4d.24xlarge", use_spot=False)])
    (spot,) = plan(task(cloud="aws", region="us-east-1", accelerators="A100:8", use_spot=True),
                   blocklist=blocked, host=SMALL_HOST)
    assert "us-east-1c" in spot.zones
    cpu = plan(task(cloud="aws", region="us-east-1", cpus="8"), blocklist=blocked,
               host=SMALL_HOST)
    assert "us-east-1c" in cpu[0].zones


def test_region_and_cloud_blocks():
    by_region = Blocklist(entries=[BlockEntry(cloud="gcp", region="us-central1")])
    found = plan(task(accelerators="L4"), blocklist=by_region, host=SMALL_HOST)
    assert found and ("gcp", "us-central1") not in {(c.cloud, c.region) for c in found}
    by_cloud = by_region.add(BlockEntry(cloud="gcp"))
    assert "gcp" not in {c.cloud for c in plan(task(accelerators="T4"), blocklist=by_cloud,
                                               host=SMALL_HOST)}


def test_a_blocked_local_cloud_moves_on_to_clouds():
    blocked = Blocklist(entries=[BlockEntry(cloud="local")])
    assert plan(task(), blocklist=blocked, host=SMALL_HOST)[0].cloud != "local"
    with pytest.raises(InfeasibleResourcesError, match="local cloud is blocked"):
        plan(task(cloud="local"), blocklist=blocked, host=SMALL_HOST)


def test_failover_walks_every_zone_then_the_next_region():
    """The loop the failover workflow runs: try, block the zone, plan again."""
    request = task(cloud="aws", accelerators="A100:8")
    blocked, tried = Blocklist(), []
    for _ in range(6):
        first = plan(request, blocklist=blocked, host=SMALL_HOST)[0]
        tried.append((first.region, first.zones[0]))
        blocked = blocked.add(block_entry(first, "CapacityError", BlockScope.ZONE,
                                          first.zones[0]))
    cheapest = plan(request, host=SMALL_HOST)[0]
    n = len(cheapest.zones)
    assert tried[:n] == [(cheapest.region, z) for z in cheapest.zones]
    assert tried[n][0] != cheapest.region


# --- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize(("resources", "message"), [
    ({"instance_type": "p4d.24xlarg"}, "unknown instance type 'p4d.24xlarg'; did you mean "
                                       "'p4d.24xlarge'"),
    ({"accelerators": "h10:8"}, "unknown accelerator 'h10'; did you mean 'H100'"),
    ({"accelerators": "a100-80gb:8"}, None),
    ({"cloud": "awz"}, "unknown cloud 'awz'; did you mean 'aws'"),
    ({"cloud": "gcp", "region": "us-centrl1"}, "unknown region 'us-centrl1' on gcp; did you "
                                               "mean 'us-central1'"),
    ({"cloud": "aws", "zone": "us-east-1z"}, "unknown zone 'us-east-1z' on aws; did you mean"),
])
def test_unknown_names_get_suggestions(resources, message):
    if message is None:
        assert plan(task(**resources), host=SMALL_HOST)[0].accelerators == {"A100-80GB": 8}
        return
    with pytest.raises(UnknownResourceError) as err:
        plan(task(**resources), host=SMALL_HOST)
    assert message in str(err.value)
    assert isinstance(err.value, OptimizerError)


def test_unknown_enabled_cloud_is_reported():
    with pytest.raises(UnknownResourceError, match="unknown cloud 'gpc'; did you mean 'gcp'"):
        plan(task(), enabled_clouds=["gpc"], host=SMALL_HOST)


def test_an_accelerator_count_nobody_offers_says_why():
    with pytest.raises(InfeasibleResourcesError) as err:
        plan(task(accelerators="A100:16"), enabled_clouds=["aws", "azure"], host=SMALL_HOST)
    counts = sorted({r.accelerator_count for r in rows() if r.cloud in ("aws", "azure")
                     and r.accelerator_name == "A100"})
    assert str(err.value) == (
        "No resources satisfy A100:16: the local cloud has no GPUs; no enabled cloud offers "
        f"A100:16 (A100 comes in counts {', '.join(map(str, counts))})")


def test_one_cloud_lacking_a_gpu_is_named():
    with pytest.raises(InfeasibleResourcesError, match="aws does not offer A10"):
        plan(task(cloud="aws", accelerators="A10"), host=SMALL_HOST)


def test_a_disabled_cloud_is_not_used_even_when_named():
    with pytest.raises(InfeasibleResourcesError, match="cloud 'aws' is not enabled"):
        plan(task(cloud="aws"), enabled_clouds=["gcp"], host=SMALL_HOST)


def test_an_instance_type_of_another_cloud_is_explained():
    with pytest.raises(InfeasibleResourcesError,
                       match="instance type 'n2-standard-4' is offered by gcp, not aws"):
        plan(task(cloud="aws", instance_type="n2-standard-4"), host=SMALL_HOST)
    with pytest.raises(InfeasibleResourcesError, match="offered by gcp, which is not enabled"):
        plan(task(instance_type="n2-standard-4"), enabled_clouds=["aws"], host=SMALL_HOST)
    with pytest.raises(InfeasibleResourcesError, match="not offered in region 'us-east-1'"):
        plan(task(instance_type="n2-standard-4", region="us-east-1"), host=SMALL_HOST)


def test_a_zone_outside_the_region_is_explained():
    with pytest.raises(InfeasibleResourcesError,
                       match="zone 'us-east-1a' is in region 'us-east-1', not 'us-west-2'"):
        plan(task(cloud="aws", region="us-west-2", zone="us-east-1a"), host=SMALL_HOST)


def test_sizes_nobody_offers_are_explained_per_cloud():
    with pytest.raises(InfeasibleResourcesError) as err:
        plan(task(cpus="1000"), host=SMALL_HOST)
    text = str(err.value)
    assert "this host has 2 CPUs, fewer than 1000" in text
    for cloud in CATALOG_CLOUDS:
        assert f"{cloud} has no CPU instance type with 1000 vCPUs" in text


def test_each_failed_alternative_is_listed_when_none_works():
    with pytest.raises(InfeasibleResourcesError) as err:
        plan(task(any_of=[{"accelerators": "A100:3"}, {"cloud": "aws", "accelerators": "A10"}]),
             host=SMALL_HOST)
    lines = str(err.value).splitlines()
    assert lines[0] == "No resources satisfy any of the alternatives:"
    assert lines[1].startswith("  A100:3: the local cloud has no GPUs; no enabled cloud offers")
    assert lines[2] == "  A10:1, cloud aws: aws does not offer A10"


def test_a_disabled_alternative_does_not_hide_the_others():
    found = plan(task(any_of=[{"cloud": "aws"}, {"cloud": "gcp"}]), enabled_clouds=["gcp"],
                 host=SMALL_HOST)
    assert {c.cloud for c in found} == {"gcp"}


def test_list_accelerators_is_available_from_the_optimizer():
    assert optimizer.list_accelerators("H200")


# --- the config: allowed clouds and default regions ---------------------------------------

def test_allowed_clouds_bound_the_search_local_included():
    found = plan(task(), allowed_clouds=["gcp"], host=SMALL_HOST)
    assert found and {c.cloud for c in found} == {"gcp"}
    assert {c.cloud for c in plan(task(), host=SMALL_HOST)} >= {"local", "aws", "gcp"}
    assert [c.cloud for c in plan(task(cpus=1), allowed_clouds=["local", "aws"],
                                  host=SMALL_HOST)][0] == "local"


def test_a_cloud_outside_allowed_clouds_is_refused_by_name():
    with pytest.raises(InfeasibleResourcesError,
                       match=r"cloud 'aws' is not in the config's allowed_clouds \(gcp, local\)"):
        plan(task(cloud="aws"), allowed_clouds=["gcp", "local"], host=SMALL_HOST)
    # another alternative may still be allowed
    found = plan(task(any_of=[{"cloud": "aws"}, {"cloud": "gcp"}]), allowed_clouds=["gcp"],
                 host=SMALL_HOST)
    assert {c.cloud for c in found} == {"gcp"}


def test_allowed_but_not_enabled_is_explained():
    with pytest.raises(InfeasibleResourcesError,
                       match=r"no cloud of the config's allowed_clouds \(azure\) is enabled"):
        plan(task(), allowed_clouds=["azure"], enabled_clouds=["aws"], host=SMALL_HOST)


def test_the_default_region_goes_first_and_the_rest_stay_for_failover():
    cheapest = plan(task(cloud="aws"), host=SMALL_HOST)
    default = next(c.region for c in reversed(cheapest) if c.region != cheapest[0].region)
    found = plan(task(cloud="aws"), default_regions={"aws": default}, host=SMALL_HOST)
    first = [c for c in found if c.region == default]
    assert found[:len(first)] == first and prices(first) == sorted(prices(first))
    rest = found[len(first):]
    assert rest and prices(rest) == sorted(prices(rest))
    assert {c.region for c in found} == {c.region for c in cheapest}


def test_the_default_region_applies_only_when_the_cloud_is_named_without_a_region():
    default = {"aws": "eu-west-1"}
    assert plan(task(), default_regions=default, host=SMALL_HOST) == plan(task(), host=SMALL_HOST)
    pinned = plan(task(cloud="aws", region="us-east-1"), default_regions=default,
                  host=SMALL_HOST)
    assert {c.region for c in pinned} == {"us-east-1"}


# --- SkyPilot's defaults and names --------------------------------------------------------

@pytest.mark.parametrize("cloud", CATALOG_CLOUDS)
def test_cpu_tasks_get_skypilots_default_families_cheapest_first(cloud):
    from orch.catalog.families import DEFAULT_CPU_FAMILIES, instance_family

    found = plan(task(cloud=cloud, cpus="4+"), host=SMALL_HOST)
    assert {instance_family(cloud, c.instance_type or "") for c in found} <= (
        DEFAULT_CPU_FAMILIES[cloud])
    # The cheaper family wins: nothing in the default families that fits is cheaper.
    fitting = [r.price for r in load_catalog(cloud).default_cpu_rows
               if r.vcpus >= 4 and r.memory_gib >= 4 * r.vcpus]
    assert found[0].price_per_node == min(fitting)
    # A type outside the default families is still there when named.
    other = next(r for r in rows(cloud) if r.accelerator_name is None
                 and instance_family(cloud, r.instance_type) not in DEFAULT_CPU_FAMILIES[cloud])
    assert plan(task(cloud=cloud, instance_type=other.instance_type), host=SMALL_HOST)


def test_default_families_are_named_as_skypilot_names_them():
    from orch.catalog.families import instance_family, is_default_cpu_type

    assert instance_family("aws", "m6i.2xlarge") == "m6i"
    assert instance_family("gcp", "n2-highmem-8") == "n2-highmem"
    assert instance_family("azure", "Standard_D8s_v5") == "Ds_v5"
    assert instance_family("azure", "Standard_E4-2s_v5") == "constrained"
    assert is_default_cpu_type("azure", "Standard_F16s_v2")
    assert not is_default_cpu_type("gcp", "e2-standard-8")


def test_unsized_gpu_on_a_gcp_n1_host_gets_skypilots_default_host():
    (first, *_) = plan(task(cloud="gcp", accelerators="T4:1"), host=SMALL_HOST)
    assert first.cpus >= 4 and first.memory_gb >= 16  # _NUM_ACC_TO_NUM_CPU T4:1 = 4
    bigger = plan(task(cloud="gcp", accelerators="T4:1", cpus="16+"), host=SMALL_HOST)
    assert bigger and all(c.cpus >= 16 and c.memory_gb >= 64 for c in bigger)  # 4 GiB/vCPU
    lean = plan(task(cloud="gcp", accelerators="T4:1", cpus="16+", memory="16+"),
                host=SMALL_HOST)
    assert lean[0].price_per_hour < bigger[0].price_per_hour  # n1-highcpu-16 may serve


@pytest.mark.parametrize(("asked", "canonical"), [
    ("a100-40gb:1", "A100"), ("A100-80gb:1", "A100-80GB"), ("h100-mega:8", "H100-MEGA"),
    ("a10g:1", "A10G"), ("mi300:8", "MI300X"), ("V100-16GB:1", "V100"),
])
def test_accelerator_names_resolve_as_skypilot_resolves_them(asked, canonical):
    # Case-insensitive, SkyPilot's memory-qualified aliases, a unique partial name.
    found = plan(task(accelerators=asked), host=SMALL_HOST)
    assert {next(iter(c.accelerators or {})) for c in found} == {canonical}


def test_a_name_matching_several_accelerators_lists_them():
    with pytest.raises(UnknownResourceError, match="did you mean 'H100' or 'H100-MEGA'"):
        plan(task(accelerators="h10:8"), host=SMALL_HOST)


def test_when_no_default_family_fits_any_cpu_type_of_the_cloud_does(monkeypatch):
    from orch import offers
    from orch.catalog.families import is_default_cpu_type
    from orch.catalog.loader import CloudCatalog
    from orch.catalog.rows import COLUMNS

    # A curated catalog may lack the big sizes of the default families: then another
    # family that fits serves, rather than no offer at all.
    small = CloudCatalog.of_text("aws", "fixture.csv", "\n".join([
        ",".join(COLUMNS),
        "c8i.24xlarge,,,96,192,4.2,1.1,us-east-1,us-east-1a",
        "m6i.large,,,2,8,0.096,0.04,us-east-1,us-east-1a",
    ]))
    monkeypatch.setattr(offers, "load_catalog", lambda cloud: small)
    (found,) = plan(task(cloud="aws", cpus="64+", memory="2x"), host=SMALL_HOST)
    assert found.instance_type == "c8i.24xlarge"
    assert not is_default_cpu_type("aws", found.instance_type)
    (default,) = plan(task(cloud="aws", cpus="2"), host=SMALL_HOST)
    assert default.instance_type == "m6i.large"
    # With r6i/r7i in the shipped catalog, 8 GiB per vCPU stays in the default families.
    monkeypatch.undo()
    ratio = plan(task(cloud="aws", cpus="8+", memory="8x"), host=SMALL_HOST)
    assert ratio and all(is_default_cpu_type("aws", c.instance_type or "") for c in ratio)
