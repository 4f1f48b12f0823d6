"""After launch: wait, query, cluster info, stop, terminate, ports and their clean-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orch.clouds.aws import AWSProvider
from orch.clouds.base import InstanceStatus
from orch.clouds.errors import BlockScope, InvalidConfigError, ProvisionError, TransientError
from tests.clouds.aws.conftest import (
    PUBLIC_KEY,
    REGION,
    ZONE_A,
    cluster_instances,
    make_config,
    new_public_key,
)
from tests.clouds.waits import wait_instances
from tests.fakes.ec2_fault_front import EC2FaultFront

RUNNING, STOPPING, STOPPED = InstanceStatus.RUNNING, InstanceStatus.STOPPING, InstanceStatus.STOPPED


def _describes(front: EC2FaultFront) -> int:
    return len(front.calls("DescribeInstances"))


def test_cluster_info_lists_the_head_first_with_addresses_and_sizes(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    record = provider.run_instances(make_config(cluster_name, num_nodes=3))
    wait_instances(provider, REGION, cluster_name, RUNNING)

    info = provider.get_cluster_info(REGION, cluster_name)

    assert (info.cloud, info.region, info.zone, info.instance_type) == (
        "aws", REGION, ZONE_A, "m5.large")
    assert info.head is not None and info.head.instance_id == record.head_instance_id
    assert [n.is_head for n in info.nodes] == [True, False, False]
    truth = {i["InstanceId"]: i for i in cluster_instances(moto_ec2, cluster_name)}
    for node in info.nodes:
        assert node.internal_ip == truth[node.instance_id]["PrivateIpAddress"]
        assert node.external_ip == truth[node.instance_id]["PublicIpAddress"]
        assert (node.runner, node.ssh_user, node.ssh_port) == ("ssh", "ubuntu", 22)
        assert (node.cpus, node.memory_gb, node.gpus) == (2.0, 8.0, {})



def test_the_config_names_the_login_user_of_an_image(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    wait_instances(provider, REGION, cluster_name, RUNNING)
    image_id = cluster_instances(moto_ec2, cluster_name)[0]["ImageId"]
    (tmp_path / "config.yaml").write_text(f"ssh_user: {{'{image_id[:6]}*': rocky}}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "config.yaml"))

    info = provider.get_cluster_info(REGION, cluster_name)

    assert [n.ssh_user for n in info.nodes] == ["rocky"]

def test_query_and_wait_follow_stop_and_terminate(
    provider: AWSProvider, cluster_name: str
) -> None:
    record = provider.run_instances(make_config(cluster_name, num_nodes=2))
    wait_instances(provider, REGION, cluster_name, RUNNING)
    head = record.head_instance_id
    (worker,) = set(record.created_instance_ids) - {head}
    assert provider.query_instances(REGION, cluster_name) == {head: RUNNING, worker: RUNNING}

    provider.stop_instances(REGION, cluster_name, worker_only=True)
    assert provider.query_instances(REGION, cluster_name) == {head: RUNNING, worker: STOPPED}

    provider.stop_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, STOPPED)
    assert provider.query_instances(REGION, cluster_name) == {head: STOPPED, worker: STOPPED}
    assert provider.get_cluster_info(REGION, cluster_name).nodes == []

    provider.terminate_instances(REGION, cluster_name, worker_only=True)
    assert provider.query_instances(REGION, cluster_name) == {head: STOPPED}

    provider.terminate_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, InstanceStatus.TERMINATING)
    assert provider.query_instances(REGION, cluster_name) == {}


def test_teardown_of_a_cluster_that_never_existed_is_a_no_op(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    provider.stop_instances(REGION, cluster_name)
    provider.terminate_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, STOPPED)
    provider.cleanup_ports(REGION, cluster_name)
    assert provider.query_instances(REGION, cluster_name) == {}
    assert not front.calls("StopInstances") and not front.calls("TerminateInstances")


def test_waiting_for_running_with_no_instances_fails(
    provider: AWSProvider, cluster_name: str
) -> None:
    with pytest.raises(ProvisionError):
        wait_instances(provider, REGION, cluster_name, RUNNING)


def test_instances_held_in_stopping_are_waited_for(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    record = provider.run_instances(make_config(cluster_name, num_nodes=2))
    provider.stop_instances(REGION, cluster_name)
    front.hold_state("stopping", polls=4)

    statuses = provider.query_instances(REGION, cluster_name)
    assert statuses == dict.fromkeys(record.created_instance_ids, STOPPING)
    before = _describes(front)
    wait_instances(provider, REGION, cluster_name, STOPPED)

    assert _describes(front) - before == 4  # three polls still stopping, then stopped
    assert set(provider.query_instances(REGION, cluster_name).values()) == {STOPPED}


def test_instances_held_in_pending_are_waited_for(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    front.hold_state("pending", polls=2)
    before = _describes(front)
    wait_instances(provider, REGION, cluster_name, RUNNING)
    assert _describes(front) - before == 3


def test_a_wait_that_never_ends_times_out_as_transient(
    aws_env: EC2FaultFront, cluster_name: str
) -> None:
    provider = AWSProvider(poll_interval=0.01, wait_timeout=0.05)
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    provider.stop_instances(REGION, cluster_name)
    aws_env.hold_state("stopping", polls=1_000_000)
    with pytest.raises(TransientError, match="stopping"):
        wait_instances(provider, REGION, cluster_name, STOPPED, timeout_s=0.05)


def test_an_instance_shutting_down_while_waiting_for_running_fails(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    provider.terminate_instances(REGION, cluster_name)
    front.hold_state("shutting-down", polls=1)
    with pytest.raises(ProvisionError, match="shutting-down"):
        wait_instances(provider, REGION, cluster_name, RUNNING)


# -- security group and key pair -----------------------------------------------------------

def _group(moto_ec2: Any, cluster_name: str) -> dict[str, Any] | None:
    groups = moto_ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"orch-{cluster_name}"]}])["SecurityGroups"]
    return groups[0] if groups else None


def _open_ranges(group: dict[str, Any]) -> set[tuple[int, int]]:
    return {(p["FromPort"], p["ToPort"]) for p in group["IpPermissions"]
            if p["IpProtocol"] == "tcp" and {"CidrIp": "0.0.0.0/0"} in p["IpRanges"]}


def _key_pairs(moto_ec2: Any, cluster_name: str) -> list[str]:
    pairs = moto_ec2.describe_key_pairs(
        Filters=[{"Name": "tag:orch-cluster", "Values": [cluster_name]}])["KeyPairs"]
    return sorted(p["KeyName"] for p in pairs)


def test_security_group_and_key_pair_lifecycle(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=2, ports=["8080", "9000-9010"]))
    group = _group(moto_ec2, cluster_name)
    assert group is not None
    assert _open_ranges(group) == {(22, 22), (8080, 8080), (9000, 9010)}
    # The nodes reach each other on every port.
    assert any(p["IpProtocol"] == "-1" and p["UserIdGroupPairs"][0]["GroupId"] == group["GroupId"]
               for p in group["IpPermissions"])
    (key_name,) = _key_pairs(moto_ec2, cluster_name)
    (pair,) = moto_ec2.describe_key_pairs(KeyNames=[key_name], IncludePublicKey=True)["KeyPairs"]
    assert pair["PublicKey"].split()[:2] == PUBLIC_KEY.split()[:2]

    provider.open_ports(REGION, cluster_name, ["7000", "8080"])  # 8080 again: no error
    group = _group(moto_ec2, cluster_name)
    assert group is not None and (7000, 7000) in _open_ranges(group)

    provider.cleanup_ports(REGION, cluster_name)  # running instances use it: kept
    provider.stop_instances(REGION, cluster_name)
    provider.cleanup_ports(REGION, cluster_name)  # a stopped cluster will run again: kept
    assert _group(moto_ec2, cluster_name) is not None

    provider.terminate_instances(REGION, cluster_name)
    assert _key_pairs(moto_ec2, cluster_name) == []
    front.hold_state("shutting-down", polls=1)
    with pytest.raises(TransientError):  # still held by instances shutting down: retry
        provider.cleanup_ports(REGION, cluster_name)
    provider.cleanup_ports(REGION, cluster_name)
    assert _group(moto_ec2, cluster_name) is None
    provider.cleanup_ports(REGION, cluster_name)  # already gone: fine


def test_a_new_ssh_key_gets_its_own_key_pair(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    provider.terminate_instances(REGION, cluster_name, worker_only=True)  # keeps key pairs
    provider.run_instances(make_config(cluster_name, num_nodes=2, ssh_public_key=new_public_key()))

    instances = cluster_instances(moto_ec2, cluster_name)
    assert len(_key_pairs(moto_ec2, cluster_name)) == 2
    assert len({i["KeyName"] for i in instances}) == 2


def test_a_security_group_of_that_name_made_by_someone_else_is_not_used(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any
) -> None:
    vpcs = moto_ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    moto_ec2.create_security_group(GroupName=f"orch-{cluster_name}", Description="not orch's",
                                   VpcId=vpcs[0]["VpcId"])
    with pytest.raises(InvalidConfigError) as caught:
        provider.run_instances(make_config(cluster_name))
    assert caught.value.scope is BlockScope.REGION
    assert cluster_instances(moto_ec2, cluster_name) == []
