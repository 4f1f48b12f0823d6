"""SkyPilot's machine-shaping resource fields (orch.spec_resource_fields, orch.spec_labels,
orch.clouds.tiers): every written form, its normal form, and what each cloud is asked."""

from __future__ import annotations

import pytest

from orch.client import Client
from orch.clouds.tiers import (
    DiskTier,
    aws_ebs,
    azure_storage_account_type,
    disk_tier_fits,
    effective_tier,
    gcp_disk,
)
from orch.lifecycle import Autostop
from orch.optimizer import plan
from orch.spec import SpecError, parse_task
from workflows.failover_calls import resources_of


def resources(**fields: object):  # type: ignore[no-untyped-def]
    return parse_task({"run": "x", "resources": fields}, "t.yaml").resources


def refusal(**fields: object) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_task({"run": "x", "resources": fields}, "t.yaml")
    return dict(caught.value.problems)


@pytest.mark.parametrize(("written", "gb"), [
    (256, 256), ("256", 256), ("256GB", 256), ("1TB", 1024), ("1tb", 1024), ("1500MB", 1),
    ("2048 MB", 2), ("0.5TB", 512),
])
def test_disk_size_takes_skypilots_units_floored_to_gb(written: object, gb: int) -> None:
    assert resources(disk_size=written).disk_size == gb


@pytest.mark.parametrize(("written", "normal"), [
    ("64GB", "64"), ("64GB+", "64+"), ("1TB+", "1024+"), ("512MB", "0.5"), ("32+", "32+"),
    ("8x", "8x"), (16, "16"),
])
def test_memory_takes_units(written: object, normal: str) -> None:
    assert resources(memory=written).memory == normal


@pytest.mark.parametrize("bad", ["lots", "12 parsecs", True, [1], "-5GB"])
def test_a_bad_size_names_disk_size(bad: object) -> None:
    assert "resources.disk_size" in refusal(disk_size=bad)


@pytest.mark.parametrize(("written", "setting"), [
    (True, Autostop(idle_minutes=5)), (False, None), (10, Autostop(idle_minutes=10)),
    ("10m", Autostop(idle_minutes=10)), ("2h", Autostop(idle_minutes=120)),
    ("1d", Autostop(idle_minutes=1440)), ("1w", Autostop(idle_minutes=10080)),
    ({"idle_minutes": 30, "down": True}, Autostop(idle_minutes=30, down=True)),
    ({"idle_minutes": "1h", "wait_for": "jobs"}, Autostop(idle_minutes=60)),
    ({"down": True}, Autostop(idle_minutes=5, down=True)),
])
def test_every_autostop_form(written: object, setting: Autostop | None) -> None:
    assert resources(autostop=written).autostop == setting


@pytest.mark.parametrize(("bad", "says"), [
    ({"idle_minutes": 5, "hook": "git push"}, "resources.autostop.hook is not supported"),
    ({"wait_for": "none"}, "wait_for: none is not supported"),
    ({"wait_for": "ssh"}, "jobs_and_ssh, jobs or none"),
    ({"idle": 5}, "unknown autostop field 'idle'"), ("soon", "10m, 2h"), (-1, "0 or more"),
    ({"down": "yes"}, "true or false"),
])
def test_a_bad_autostop_says_why(bad: object, says: str) -> None:
    assert says in refusal(autostop=bad)["resources.autostop"]


def test_the_tasks_autostop_is_the_launchs_unless_the_flags_say_one() -> None:
    task = parse_task({"run": "x", "resources": {"autostop": "1h"}}, "t.yaml")
    from_yaml = Client.launch_request(task, retry_until_up=False, autostop=None,
                                      new_cluster=False)
    assert from_yaml.autostop == Autostop(idle_minutes=60)
    flag = Autostop(idle_minutes=3, down=True)
    assert Client.launch_request(task, retry_until_up=False, autostop=flag,
                                 new_cluster=False).autostop == flag


def test_labels_are_text_and_checked_against_every_cloud_a_task_may_land_on() -> None:
    assert resources(labels={"n": 3, "on": True}).labels == {"n": "3", "on": "true"}
    # AWS and Azure take capitals; GCP does not, so a task that names no cloud is refused.
    assert resources(cloud="aws", labels={"Project": "X"}).labels == {"Project": "X"}
    assert "with no cloud named" in refusal(labels={"Project": "X"})["resources.labels"]
    found = refusal(cloud="gcp", labels={"team": "Research"})["resources.labels"]
    assert "GCP label values" in found and "no cloud named" not in found
    assert "'aws:'" in refusal(cloud="aws", labels={"aws:x": "y"})["resources.labels"]
    assert "< > %" in refusal(cloud="azure", labels={"a/b": "y"})["resources.labels"]
    assert "orch's own" in refusal(labels={"orch-cluster": "x"})["resources.labels"]
    # Inside any_of, each choice is checked against its own cloud.
    mixed = resources(any_of=[{"cloud": "aws", "labels": {"Team": "X"}},
                              {"cloud": "gcp", "labels": {"team": "x"}}])
    assert [c.labels for c in mixed.alternatives()] == [{"Team": "X"}, {"team": "x"}]


def test_a_per_region_image_limits_failover_to_its_regions() -> None:
    res = resources(cloud="aws", image_id={"us-east-1": "ami-1", "us-west-2": "ami-2"})
    assert [(c.region, c.image_id) for c in res.alternatives()] == [
        ("us-east-1", "ami-1"), ("us-west-2", "ami-2")]
    pinned = resources(region="us-west-2", image_id={"us-east-1": "ami-1", "us-west-2": "ami-2"})
    assert [(c.region, c.image_id) for c in pinned.alternatives()] == [("us-west-2", "ami-2")]
    found = refusal(region="eu-west-1", image_id={"us-east-1": "ami-1"})
    assert "no image for region 'eu-west-1'" in found["resources.image_id"]
    assert "at least one region" in refusal(image_id={})["resources.image_id"]


def test_the_launch_boots_the_image_and_disk_of_the_choice_it_planned() -> None:
    task = parse_task({"run": "x", "resources": {
        "cpus": "4+", "disk_tier": "low",
        "any_of": [{"infra": "aws/us-east-1", "image_id": "ami-1"},
                   {"infra": "gcp/us-central1", "image_id": "projects/p/global/images/i",
                    "disk_tier": "high"}]}}, "t.yaml")
    candidates = plan(task, enabled_clouds=["aws", "gcp"])
    by_cloud = {c.cloud: resources_of(task, c) for c in candidates}
    assert (by_cloud["aws"].image_id, by_cloud["aws"].disk_tier) == ("ami-1", DiskTier.LOW)
    assert (by_cloud["gcp"].image_id, by_cloud["gcp"].disk_tier) == (
        "projects/p/global/images/i", DiskTier.HIGH)


def test_max_hourly_cost_drops_what_costs_more_per_node() -> None:
    task = parse_task({"run": "x", "num_nodes": 2,
                       "resources": {"cpus": "4+", "max_hourly_cost": 0.25}}, "t.yaml")
    candidates = [c for c in plan(task, enabled_clouds=["aws", "gcp", "azure"])
                  if c.cloud != "local"]
    assert candidates and all(c.price_per_node <= 0.25 for c in candidates)
    assert any(c.price_per_hour > 0.25 for c in candidates)  # per node, not per cluster


@pytest.mark.parametrize(("accelerators", "entries", "kind", "expected"), [
    (["A100:1", "V100:1"], {"ordered": [{"cloud": "aws"}, {"cloud": "gcp"}]}, True,
     [("aws", "A100"), ("aws", "V100"), ("gcp", "A100"), ("gcp", "V100")]),
    ({"L4:1": None, "T4:1": None}, {"ordered": [{"cloud": "aws"}, {"cloud": "gcp"}]}, False,
     [("aws", "L4"), ("aws", "T4"), ("gcp", "L4"), ("gcp", "T4")]),
    (["L4:1", "T4:1"], {"any_of": [{"cloud": "aws"}, {"cloud": "gcp",
                                                      "accelerators": "A100:1"}]}, False,
     [("aws", "L4"), ("aws", "T4"), ("gcp", "A100")]),
])
def test_accelerator_choices_cross_any_of_and_ordered(
        accelerators: object, entries: dict, kind: bool,
        expected: list[tuple[str, str]]) -> None:
    res = resources(accelerators=accelerators, **entries)
    assert res.is_ordered is kind
    assert [(c.cloud, *(c.accelerators or {})) for c in res.alternatives()] == expected


@pytest.mark.parametrize(("written", "strategy", "restarts"), [
    ("none", "EAGER_NEXT_REGION", 0), ("failover", "FAILOVER", 0),
    ("EAGER_NEXT_REGION", "EAGER_NEXT_REGION", 0),
    ({"strategy": "FAILOVER", "max_restarts_on_errors": 3}, "FAILOVER", 3),
    ({"max_restarts_on_errors": 2}, "EAGER_NEXT_REGION", 2),
    ({"strategy": None}, "EAGER_NEXT_REGION", 0),
])
def test_every_job_recovery_form(written: object, strategy: str, restarts: int) -> None:
    recovery = resources(job_recovery=written).job_recovery
    assert recovery is not None
    assert (recovery.strategy, recovery.max_restarts_on_errors) == (strategy, restarts)


def test_an_unknown_recovery_strategy_is_refused() -> None:
    assert "resources.job_recovery.strategy" in refusal(job_recovery="sometimes")


def test_disk_tiers_on_each_cloud() -> None:
    assert aws_ebs(None, "m6i.large", 256) == {"VolumeType": "gp3", "Iops": 3500,
                                               "Throughput": 218}
    assert aws_ebs(DiskTier.LOW, "m6i.large", 256) == {"VolumeType": "standard"}
    assert aws_ebs(DiskTier.ULTRA, "m6i.large", 256) == {"VolumeType": "io2", "Iops": 20000}
    assert aws_ebs(DiskTier.HIGH, "m6i.large", 8)["Iops"] == 4000  # 500 IOPS per GiB
    assert gcp_disk(DiskTier.HIGH, "n2-standard-8", "z")["diskType"] == "zones/z/diskTypes/pd-ssd"
    assert effective_tier("gcp", DiskTier.BEST, "n2-standard-8") == DiskTier.HIGH
    assert effective_tier("gcp", DiskTier.BEST, "n2-highmem-64") == DiskTier.ULTRA
    assert not disk_tier_fits("gcp", DiskTier.ULTRA, "n2-standard-8")
    assert azure_storage_account_type(DiskTier.BEST, "Standard_D4s_v5") == "Premium_LRS"
    assert azure_storage_account_type(DiskTier.BEST, "Standard_D4_v5") == "StandardSSD_LRS"
    assert not disk_tier_fits("azure", DiskTier.ULTRA, "Standard_D4s_v5")
    assert disk_tier_fits("local", DiskTier.ULTRA, None)
