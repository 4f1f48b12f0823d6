"""run_instances against the Compute Engine fake: what is created, idempotence, and both
error shapes for capacity and quota."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orch.clouds.base import TAG_CLUSTER, TAG_NODE_KIND, ProvisionConfig
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    QuotaError,
    TransientError,
)
from orch.clouds.gcp import GCPProvider
from orch.clouds.tiers import DiskTier, NetworkTier
from tests.clouds.gcp.conftest import REGION, ZONE
from tests.clouds.waits import provisioned
from tests.fakes.gcp_compute_fake import GCPComputeFake

Config = Callable[..., ProvisionConfig]


def test_creates_labelled_instances_with_deterministic_names(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    record = provider.run_instances(config(num_nodes=3, ssh_public_key="ssh-ed25519 AAAA k"))

    assert record.head_instance_id == "c1-head"
    assert record.created_instance_ids == ["c1-head", "c1-worker-1", "c1-worker-2"]
    assert (record.zone, record.resumed_instance_ids) == (ZONE, [])
    instances = fake.instances()
    assert sorted(instances) == ["c1-head", "c1-worker-1", "c1-worker-2"]
    head = instances["c1-head"]
    assert head["labels"] == {TAG_CLUSTER: "c1", TAG_NODE_KIND: "head"}
    assert instances["c1-worker-2"]["labels"][TAG_NODE_KIND] == "worker"
    assert head["machineType"].endswith(f"/zones/{ZONE}/machineTypes/n2-standard-8")
    assert head["tags"]["items"] == ["orch-c1"]
    assert head["metadata"]["items"] == [{"key": "ssh-keys", "value": "orch:ssh-ed25519 AAAA k"}]
    assert head["scheduling"]["provisioningModel"] == "STANDARD"


def test_spot_sets_the_spot_provisioning_model(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1, use_spot=True))

    scheduling = fake.instances()["c1-head"]["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["onHostMaintenance"] == "TERMINATE"


def test_gpu_machine_types_do_not_live_migrate(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1, instance_type="a2-highgpu-1g"))

    assert fake.instances()["c1-head"]["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_invalid_cluster_names_become_valid_gcp_names(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(cluster_name="My_Cluster", num_nodes=1))

    (name,) = fake.instances()
    label = fake.instances()[name]["labels"][TAG_CLUSTER]
    assert name == f"{label}-head"
    assert label.startswith("my-cluster-") and label == label.lower()
    assert list(provider.query_instances(REGION, "My_Cluster")) == [name]
    assert provider.query_instances(REGION, "my-cluster") == {}


def test_zone_defaults_to_the_regions_first_zone(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    record = provider.run_instances(config(zone=None, num_nodes=1))

    assert record.zone == "us-central1-a"
    assert fake.calls("instances.insert") == [("instances.insert", "us-central1-a")]


def test_a_cluster_stays_in_the_zone_it_has(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(zone="us-central1-b", num_nodes=1))

    grown = provider.run_instances(config(zone=None, num_nodes=2))
    assert grown.zone == "us-central1-b"
    with pytest.raises(InvalidConfigError) as raised:
        provider.run_instances(config(zone="us-central1-c", num_nodes=2))
    assert raised.value.scope == BlockScope.ZONE


def test_machine_type_is_required(provider: GCPProvider, config: Config) -> None:
    with pytest.raises(InvalidConfigError):
        provider.run_instances(config(instance_type=None))


def test_retry_after_a_failure_meets_already_exists_and_creates_no_duplicate(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    # The first attempt creates the head; the API then fails the first worker's insert.
    fake.fail_http("instances.insert", 503, "backendError", zone=ZONE, skip=1)
    cfg = config(num_nodes=3)
    with pytest.raises(TransientError):
        provider.run_instances(cfg)
    assert list(fake.instances()) == ["c1-head"]

    record = provider.run_instances(cfg)

    # The head's insert met 409 alreadyExists, which counts as success.
    assert len(fake.calls("instances.insert")) == 2 + 3
    assert record.created_instance_ids == ["c1-worker-1", "c1-worker-2"]
    assert sorted(fake.instances()) == ["c1-head", "c1-worker-1", "c1-worker-2"]


def test_relaunching_an_up_cluster_creates_nothing(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=2))
    ids = {name: i["id"] for name, i in fake.instances().items()}

    record = provider.run_instances(config(num_nodes=2, idempotency_token="attempt-2"))

    assert (record.created_instance_ids, record.resumed_instance_ids) == ([], [])
    assert {name: i["id"] for name, i in fake.instances().items()} == ids


def test_growing_a_cluster_adds_only_the_missing_workers(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1))

    record = provider.run_instances(config(num_nodes=3))

    assert record.created_instance_ids == ["c1-worker-1", "c1-worker-2"]


CAPACITY = ("ZONE_RESOURCE_POOL_EXHAUSTED",
            f"The zone 'projects/orch-test/zones/{ZONE}' does not have enough resources "
            "available to fulfill the request.  Try a different zone, or try again later.")


@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED",
                                  "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"])
def test_capacity_inside_the_operation_blocks_the_zone(
    fake: GCPComputeFake, provider: GCPProvider, config: Config, code: str
) -> None:
    fake.fail_operation("instances.insert", code, CAPACITY[1], zone=ZONE, skip=1)

    with pytest.raises(CapacityError) as raised:
        provisioned(provider, config(num_nodes=2))

    assert (raised.value.code, raised.value.scope) == (code, BlockScope.ZONE)
    assert "does not have enough resources" in raised.value.message
    assert list(fake.instances()) == ["c1-head"]  # the partial cluster the workflow cleans up


def test_capacity_as_an_http_error_blocks_the_zone(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.fail_http("instances.insert", 503, "ZONE_RESOURCE_POOL_EXHAUSTED", CAPACITY[1])

    with pytest.raises(CapacityError) as raised:
        provider.run_instances(config())

    assert raised.value.scope == BlockScope.ZONE
    assert fake.instances() == {}


def test_capacity_only_in_one_zone(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.fail_operation("instances.insert", *CAPACITY, zone=ZONE, times=5)

    with pytest.raises(CapacityError):
        provisioned(provider, config(num_nodes=1))
    record = provisioned(provider, config(cluster_name="c2", zone="us-central1-b"))

    assert record.zone == "us-central1-b"


def test_regional_quota_inside_the_operation_blocks_the_region(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    """The fake enforces quotas as Google does: the insert is accepted, its operation
    fails with QUOTA_EXCEEDED naming the metric."""
    fake.set_quota(REGION, "N2_CPUS", 12)

    with pytest.raises(QuotaError) as raised:
        provisioned(provider, config(num_nodes=2))  # 2 x 8 vCPUs

    assert (raised.value.code, raised.value.scope) == ("QUOTA_EXCEEDED", BlockScope.REGION)
    assert "'N2_CPUS' exceeded" in raised.value.message
    assert list(fake.instances()) == ["c1-head"]


def test_regional_quota_as_an_http_error_blocks_the_region(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.fail_http("instances.insert", 403, "quotaExceeded",
                   f"Quota 'CPUS' exceeded.  Limit: 24.0 in region {REGION}.")

    with pytest.raises(QuotaError) as raised:
        provider.run_instances(config())

    assert (raised.value.code, raised.value.scope) == ("quotaExceeded", BlockScope.REGION)


def test_global_gpu_quota_blocks_the_cloud_in_both_shapes(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    fake.set_quota(None, "GPUS_ALL_REGIONS", 1)
    with pytest.raises(QuotaError) as in_operation:
        provisioned(provider, config(num_nodes=2, instance_type="a2-highgpu-1g"))
    fake.fail_http("instances.insert", 403, "quotaExceeded",
                   "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 1.0 globally.")
    with pytest.raises(QuotaError) as as_http:
        provisioned(provider, config(cluster_name="c2", instance_type="a2-highgpu-1g"))

    assert "GPUS_ALL_REGIONS" in in_operation.value.message
    assert in_operation.value.scope == BlockScope.CLOUD
    assert as_http.value.scope == BlockScope.CLOUD


@pytest.mark.parametrize(
    ("code", "kind"),
    [("VPC_NOT_FOUND", InvalidConfigError), ("IAM_PERMISSION_DENIED", AuthError)],
)
def test_configuration_and_permission_errors_block_the_cloud(
    fake: GCPComputeFake, provider: GCPProvider, config: Config, code: str,
    kind: type[Exception],
) -> None:
    fake.fail_operation("instances.insert", code)

    with pytest.raises(kind) as raised:
        provisioned(provider, config(num_nodes=1))

    assert getattr(raised.value, "scope") == BlockScope.CLOUD  # noqa: B009


def test_unknown_machine_type_in_zone(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    with pytest.raises(CapacityError) as raised:
        provider.run_instances(config(instance_type="z9-nonexistent-1"))
    assert raised.value.scope == BlockScope.ZONE
    assert fake.calls("instances.insert") == []


def test_disk_tier_labels_and_network_tier_reach_compute_engine(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    """pd-ssd for disk_tier high, the task's labels beside orch's, gVNIC for network_tier
    best (no Tier_1 below 30 vCPUs); see orch.clouds.tiers."""
    provider.run_instances(config(num_nodes=1, cpus=8, disk_tier=DiskTier.HIGH,
                                  network_tier=NetworkTier.BEST,
                                  labels={"project": "llm", "team": "research"}))

    head = fake.instances()["c1-head"]
    assert head["labels"] == {"project": "llm", "team": "research", TAG_CLUSTER: "c1",
                              TAG_NODE_KIND: "head"}
    assert fake.boot_disks()["c1-head"]["type"].endswith(f"/zones/{ZONE}/diskTypes/pd-ssd")
    (call,) = [body for method, body in fake.bodies("instances.insert")]
    assert call["networkInterfaces"][0]["nicType"] == "GVNIC"
    assert "networkPerformanceConfig" not in call


def test_disk_tier_best_is_pd_extreme_where_the_type_takes_it(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1, instance_type="n2-standard-64", cpus=64,
                                  disk_tier=DiskTier.BEST, network_tier=NetworkTier.BEST))
    disk = fake.boot_disks()["c1-head"]
    assert disk["type"].endswith("/diskTypes/pd-extreme") and disk["provisionedIops"] == "20000"
    (call,) = [body for method, body in fake.bodies("instances.insert")]
    assert call["networkPerformanceConfig"] == {"totalEgressBandwidthTier": "TIER_1"}


def test_no_disk_tier_is_pd_balanced_and_the_fake_refuses_an_unknown_type(
    fake: GCPComputeFake, provider: GCPProvider, config: Config
) -> None:
    provider.run_instances(config(num_nodes=1))
    assert fake.boot_disks()["c1-head"]["type"].endswith("/diskTypes/pd-balanced")
    with pytest.raises(InvalidConfigError):
        provider.run_instances(config(cluster_name="c2", num_nodes=1, disk_tier=DiskTier.ULTRA))
