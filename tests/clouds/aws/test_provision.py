"""run_instances against moto: what is made, how it is tagged, and that retries never duplicate."""

from __future__ import annotations

from typing import Any

import pytest

from orch.clouds.aws import AWSProvider
from orch.clouds.aws_images import CANONICAL_OWNER
from orch.clouds.base import TAG_CLUSTER, TAG_NODE_KIND, InstanceStatus, Provider
from orch.clouds.errors import BlockScope, InvalidConfigError, TransientError
from orch.clouds.tiers import DiskTier, NetworkTier
from tests.clouds.aws.conftest import (
    INSTANCE_TYPE,
    REGION,
    ZONE_A,
    ZONE_B,
    cluster_instances,
    make_config,
)
from tests.clouds.waits import wait_instances
from tests.fakes.ec2_fault_front import EC2FaultFront


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def test_is_a_provider(provider: AWSProvider) -> None:
    assert isinstance(provider, Provider)


def test_launch_makes_a_tagged_head_and_workers_in_the_zone(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    record = provider.run_instances(make_config(cluster_name, num_nodes=3))

    instances = cluster_instances(moto_ec2, cluster_name)
    assert sorted(i["InstanceId"] for i in instances) == sorted(record.created_instance_ids)
    assert record.resumed_instance_ids == []
    assert record.zone == ZONE_A
    by_id = {i["InstanceId"]: i for i in instances}
    head = by_id[record.head_instance_id]
    assert _tags(head)[TAG_NODE_KIND] == "head"
    kinds = sorted(_tags(i)[TAG_NODE_KIND] for i in instances)
    assert kinds == ["head", "worker", "worker"]
    for instance in instances:
        assert _tags(instance)[TAG_CLUSTER] == cluster_name
        assert instance["InstanceType"] == INSTANCE_TYPE
        assert instance["Placement"]["AvailabilityZone"] == ZONE_A
        assert instance["KeyName"].startswith(f"orch-{cluster_name}-")
        assert [g["GroupName"] for g in instance["SecurityGroups"]] == [f"orch-{cluster_name}"]
        assert instance.get("InstanceLifecycle") != "spot"
    # Every node went through the front (AWS_ENDPOINT_URL), each with its own ClientToken.
    runs = front.calls("RunInstances")
    assert len(runs) == 3 and len({c.client_token for c in runs}) == 3
    assert all(c.zone == ZONE_A and c.client_token for c in runs)


def test_the_root_volume_has_the_disk_size_and_the_default_image_is_ubuntu_lts(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1, disk_size=77))

    (instance,) = cluster_instances(moto_ec2, cluster_name)
    (image,) = moto_ec2.describe_images(ImageIds=[instance["ImageId"]])["Images"]
    assert image["OwnerId"] == CANONICAL_OWNER
    # moto holds Ubuntu 14.04 and 16.04 server images: the newer LTS wins.
    assert "ubuntu-xenial-16.04-amd64-server" in image["Name"]
    volumes = moto_ec2.describe_volumes(
        Filters=[{"Name": "tag:orch-cluster", "Values": [cluster_name]}])["Volumes"]
    assert [(v["Size"], v["VolumeType"]) for v in volumes] == [(77, "gp3")]


def test_an_image_that_does_not_exist_is_a_config_error(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        provider.run_instances(make_config(cluster_name, image_id="ami-0123456789abcdef0"))
    assert caught.value.code == "InvalidAMIID.NotFound"
    assert caught.value.scope is BlockScope.CLOUD
    assert cluster_instances(moto_ec2, cluster_name) == []


def test_no_default_image_for_the_architecture_blocks_the_region(
    provider: AWSProvider, cluster_name: str
) -> None:
    # m6g is Graviton (arm64); moto holds no arm64 Ubuntu image.
    with pytest.raises(InvalidConfigError) as caught:
        provider.run_instances(make_config(cluster_name, instance_type="m6g.large"))
    assert caught.value.scope is BlockScope.REGION


def test_without_a_zone_the_workers_follow_the_head(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    record = provider.run_instances(make_config(cluster_name, num_nodes=3, zone=None))

    zones = {i["Placement"]["AvailabilityZone"] for i in cluster_instances(moto_ec2, cluster_name)}
    assert zones == {record.zone}


def test_spot_instances_are_requested_as_spot(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1, use_spot=True))
    (instance,) = cluster_instances(moto_ec2, cluster_name)
    assert instance["InstanceLifecycle"] == "spot"


def test_a_repeated_call_creates_nothing(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    config = make_config(cluster_name, num_nodes=2)
    first = provider.run_instances(config)
    again = provider.run_instances(config)

    assert again.created_instance_ids == []
    assert again.head_instance_id == first.head_instance_id
    assert len(cluster_instances(moto_ec2, cluster_name)) == 2
    assert len(front.calls("RunInstances")) == 2


def test_growing_a_cluster_creates_only_the_shortfall(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    first = provider.run_instances(make_config(cluster_name, num_nodes=1))
    grown = provider.run_instances(make_config(cluster_name, num_nodes=3))

    assert grown.head_instance_id == first.head_instance_id
    assert len(grown.created_instance_ids) == 2
    assert len(cluster_instances(moto_ec2, cluster_name)) == 3


def test_more_instances_than_asked_for_is_a_config_error(
    provider: AWSProvider, cluster_name: str
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=2))
    with pytest.raises(InvalidConfigError):
        provider.run_instances(make_config(cluster_name, num_nodes=1))


def test_a_lost_answer_retried_by_botocore_is_replayed_not_duplicated(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    # The head's RunInstances takes effect, then its answer is lost (HTTP 500); botocore
    # sends it again with the same ClientToken and EC2 answers with the same instance.
    front.fail("RunInstances", "InternalError", after_forward=True, times=1)
    record = provider.run_instances(make_config(cluster_name, num_nodes=2))

    assert len(cluster_instances(moto_ec2, cluster_name)) == 2
    outcomes = [c.outcome for c in front.calls("RunInstances")]
    assert outcomes == ["InternalError", "replayed", "moto"]
    assert len(record.created_instance_ids) == 2


def test_an_activity_retry_after_a_lost_answer_makes_no_duplicates(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    config = make_config(cluster_name, num_nodes=2)
    front.fail("RunInstances", "InternalError", after_forward=True)  # every answer lost
    with pytest.raises(TransientError):
        provider.run_instances(config)
    (made,) = cluster_instances(moto_ec2, cluster_name)  # the head exists; nobody knows

    # The activity is retried with the same attempt token while DescribeInstances does not
    # list the new head yet (EC2 is eventually consistent): the head's ClientToken is sent
    # again and EC2 answers with the head it already made.
    front.reset()
    front.hide_instances(polls=2)  # both looks run_instances takes before launching
    record = provider.run_instances(config)

    instances = cluster_instances(moto_ec2, cluster_name)
    assert len(instances) == 2
    assert record.head_instance_id == made["InstanceId"]
    assert [c.outcome for c in front.calls("RunInstances")] == ["replayed", "moto"]


def test_a_retry_that_sees_the_head_launches_only_the_workers(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    config = make_config(cluster_name, num_nodes=3)
    front.fail("RunInstances", "InternalError", after_forward=True)
    with pytest.raises(TransientError):
        provider.run_instances(config)
    front.reset()
    record = provider.run_instances(config)

    assert len(cluster_instances(moto_ec2, cluster_name)) == 3
    assert len(record.created_instance_ids) == 2
    assert len(front.calls("RunInstances")) == 2


def test_a_stopped_cluster_is_resumed_with_the_same_instances(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    first = provider.run_instances(make_config(cluster_name, num_nodes=2))
    provider.stop_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, InstanceStatus.STOPPED)

    resumed = provider.run_instances(make_config(cluster_name, num_nodes=2))
    wait_instances(provider, REGION, cluster_name, InstanceStatus.RUNNING)

    assert sorted(resumed.resumed_instance_ids) == sorted(first.created_instance_ids)
    assert resumed.created_instance_ids == []
    assert resumed.head_instance_id == first.head_instance_id
    assert set(provider.query_instances(REGION, cluster_name)) == set(first.created_instance_ids)


def test_resume_waits_for_instances_still_stopping(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    first = provider.run_instances(make_config(cluster_name, num_nodes=1))
    provider.stop_instances(REGION, cluster_name)
    front.hold_state("stopping", polls=3)

    resumed = provider.run_instances(make_config(cluster_name, num_nodes=1))

    assert resumed.resumed_instance_ids == first.created_instance_ids
    assert front.calls("StartInstances")


def test_without_resume_stopped_instances_are_left_and_new_ones_made(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    first = provider.run_instances(make_config(cluster_name, num_nodes=1))
    provider.stop_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, InstanceStatus.STOPPED)

    fresh = provider.run_instances(make_config(cluster_name, num_nodes=1, resume_stopped=False))

    assert fresh.resumed_instance_ids == []
    assert fresh.head_instance_id != first.head_instance_id
    instances = cluster_instances(moto_ec2, cluster_name)
    states = {i["InstanceId"]: i["State"]["Name"] for i in instances}
    assert states == {first.head_instance_id: "stopped", fresh.head_instance_id: "running"}


def test_zone_b_works_while_zone_a_has_no_capacity(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    front.fail("RunInstances", "InsufficientInstanceCapacity", zone=ZONE_A)
    record = provider.run_instances(make_config(cluster_name, num_nodes=2, zone=ZONE_B))

    assert record.zone == ZONE_B
    assert len(cluster_instances(moto_ec2, cluster_name)) == 2


def test_disk_tier_labels_and_network_tier_reach_ec2(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    """resources.disk_tier/labels/network_tier (orch.clouds.tiers): gp3 at 6,000 IOPS for
    high, the labels as tags (``Name`` replacing orch's), an EFA interface on a type whose
    DescribeInstanceTypes says EfaSupported, in the zone's subnet."""
    config = make_config(cluster_name, num_nodes=1, instance_type="c6i.32xlarge",
                         disk_size=100, disk_tier=DiskTier.HIGH, network_tier=NetworkTier.BEST,
                         labels={"project": "llm", "Name": "trainer"})
    provider.run_instances(config)

    (instance,) = cluster_instances(moto_ec2, cluster_name)
    tags = _tags(instance)
    assert tags["project"] == "llm" and tags["Name"] == "trainer"
    assert tags[TAG_CLUSTER] == cluster_name
    volumes = moto_ec2.describe_volumes(
        Filters=[{"Name": "tag:orch-cluster", "Values": [cluster_name]}])["Volumes"]
    assert [(v["Size"], v["VolumeType"]) for v in volumes] == [(100, "gp3")]
    call = front.calls("RunInstances")[-1]
    # moto keeps no gp3 IOPS: what EC2 was asked for is on the wire.
    assert (call.params["BlockDeviceMapping.1.Ebs.Iops"],
            call.params["BlockDeviceMapping.1.Ebs.Throughput"]) == ("6000", "375")
    assert call.params["NetworkInterface.1.InterfaceType"] == "efa"
    assert call.params["NetworkInterface.1.SubnetId"].startswith("subnet-")
    assert "SecurityGroupId.1" not in call.params
    assert instance["NetworkInterfaces"][0]["SubnetId"] == call.params[
        "NetworkInterface.1.SubnetId"]


# ultra (io2) is checked on orch.clouds.tiers alone: moto drops a block device mapping's
# Iops on RunInstances and then refuses io2 for lacking them.
@pytest.mark.parametrize(("tier", "expected"), [
    (DiskTier.LOW, ("standard", None)), (None, ("gp3", 3500)),
])
def test_each_disk_tier_is_its_ebs_volume_type(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront,
    tier: DiskTier | None, expected: tuple[str, int | None],
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1, disk_size=64,
                                       disk_tier=tier, network_tier=NetworkTier.BEST))
    volumes = moto_ec2.describe_volumes(
        Filters=[{"Name": "tag:orch-cluster", "Values": [cluster_name]}])["Volumes"]
    assert [v["VolumeType"] for v in volumes] == [expected[0]]
    last = front.calls("RunInstances")[-1]
    assert last.params.get("BlockDeviceMapping.1.Ebs.Iops") == (
        str(expected[1]) if expected[1] else None)
    # The default type has no EFA: network_tier best leaves it a plain interface.
    assert "NetworkInterface.1.InterfaceType" not in last.params
    assert last.params["SecurityGroupId.1"].startswith("sg-")
