"""EC2's error codes, as the front answers them, become orch's typed errors with their scope."""

from __future__ import annotations

from typing import Any

import pytest

from orch.clouds.aws import AWSProvider
from orch.clouds.base import InstanceStatus
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    ProvisionError,
    QuotaError,
    TransientError,
)
from tests.clouds.aws.conftest import REGION, ZONE_A, cluster_instances, make_config
from tests.clouds.waits import wait_instances
from tests.fakes.ec2_fault_front import EC2FaultFront


@pytest.mark.parametrize(("code", "error_type", "scope"), [
    ("InsufficientInstanceCapacity", CapacityError, BlockScope.ZONE),
    ("Unsupported", CapacityError, BlockScope.ZONE),
    ("InsufficientCapacity", CapacityError, BlockScope.ZONE),
    ("InsufficientHostCapacity", CapacityError, BlockScope.ZONE),
    ("VcpuLimitExceeded", QuotaError, BlockScope.REGION),
    ("InstanceLimitExceeded", QuotaError, BlockScope.REGION),
    ("MaxSpotInstanceCountExceeded", QuotaError, BlockScope.REGION),
    ("RequestLimitExceeded", TransientError, BlockScope.NONE),
    ("InternalError", TransientError, BlockScope.NONE),
    ("Unavailable", TransientError, BlockScope.NONE),
    ("ServiceUnavailable", TransientError, BlockScope.NONE),
    ("Throttling", TransientError, BlockScope.NONE),
    ("AuthFailure", AuthError, BlockScope.CLOUD),
    ("InvalidClientTokenId", AuthError, BlockScope.CLOUD),
    ("ExpiredToken", AuthError, BlockScope.CLOUD),
    ("UnauthorizedOperation", AuthError, BlockScope.CLOUD),
    ("InvalidAMIID.Malformed", InvalidConfigError, BlockScope.CLOUD),
    ("InvalidParameterValue", InvalidConfigError, BlockScope.CLOUD),
])
def test_run_instances_errors_are_typed(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront, code: str,
    error_type: type[ProvisionError], scope: BlockScope,
) -> None:
    front.fail("RunInstances", code)
    with pytest.raises(error_type) as caught:
        provider.run_instances(make_config(cluster_name))
    assert type(caught.value) is error_type
    assert caught.value.code == code
    assert caught.value.scope is scope


def test_capacity_error_in_zone_a_blocks_only_that_zone(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    front.fail("RunInstances", "InsufficientInstanceCapacity", zone=ZONE_A)
    with pytest.raises(CapacityError) as caught:
        provider.run_instances(make_config(cluster_name, zone=ZONE_A))

    assert caught.value.scope is BlockScope.ZONE
    assert ZONE_A in caught.value.message and "m5.large" in caught.value.message
    assert cluster_instances(moto_ec2, cluster_name) == []


def test_capacity_error_without_a_zone_blocks_the_region(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    # With no zone asked for, EC2 already chose the zone with the most capacity.
    front.fail("RunInstances", "InsufficientInstanceCapacity")
    with pytest.raises(CapacityError) as caught:
        provider.run_instances(make_config(cluster_name, zone=None))
    assert caught.value.scope is BlockScope.REGION


def test_head_made_but_worker_failed_leaves_nothing_after_terminate_by_tag(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    front.fail("RunInstances", "InsufficientInstanceCapacity", skip=1)  # the head gets through
    with pytest.raises(CapacityError):
        provider.run_instances(make_config(cluster_name, num_nodes=3))
    (head,) = provider.query_instances(REGION, cluster_name)  # all or nothing: caller cleans

    provider.terminate_instances(REGION, cluster_name)
    wait_instances(provider, REGION, cluster_name, InstanceStatus.TERMINATING)
    provider.cleanup_ports(REGION, cluster_name)

    assert provider.query_instances(REGION, cluster_name) == {}
    assert [i["InstanceId"] for i in cluster_instances(moto_ec2, cluster_name, ("terminated",))] \
        == [head]
    tag_filter = [{"Name": "tag:orch-cluster", "Values": [cluster_name]}]
    assert moto_ec2.describe_security_groups(Filters=tag_filter)["SecurityGroups"] == []
    assert moto_ec2.describe_key_pairs(Filters=tag_filter)["KeyPairs"] == []


def test_throttling_that_passes_is_retried_by_botocore(
    provider: AWSProvider, cluster_name: str, moto_ec2: Any, front: EC2FaultFront
) -> None:
    front.fail("RunInstances", "RequestLimitExceeded", times=1)
    provider.run_instances(make_config(cluster_name, num_nodes=1))
    assert len(cluster_instances(moto_ec2, cluster_name)) == 1


def test_missing_credentials_are_an_auth_error(
    provider: AWSProvider, cluster_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(AuthError) as caught:
        AWSProvider().query_instances(REGION, cluster_name)
    assert caught.value.scope is BlockScope.CLOUD
    assert caught.value.code == "NoCredentialsError"
    ok, reason = AWSProvider().credentials_ok()
    assert not ok and "credentials" in reason.lower()


def test_credentials_ok_asks_sts(provider: AWSProvider, front: EC2FaultFront) -> None:
    ok, reason = provider.credentials_ok()
    assert ok and "123456789012" in reason
    assert front.calls("GetCallerIdentity")


def test_rejected_credentials_are_reported(provider: AWSProvider, front: EC2FaultFront) -> None:
    front.fail("GetCallerIdentity", "InvalidClientTokenId")
    ok, reason = provider.credentials_ok()
    assert not ok and "InvalidClientTokenId" in reason


# -- quota ---------------------------------------------------------------------------------

def test_zero_quota_fails_before_any_run_instances(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    front.set_quota("L-1216C47A", 0)
    with pytest.raises(QuotaError) as caught:
        provider.check_quota(make_config(cluster_name))

    assert caught.value.scope is BlockScope.REGION
    assert "L-1216C47A" in caught.value.message
    assert [c.outcome for c in front.calls("GetServiceQuota")] == ["quota"]
    assert front.calls("RunInstances") == []


def test_quota_compares_the_vcpus_asked_for(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    front.set_quota("L-1216C47A", 4)  # two m5.large are 4 vCPUs
    provider.check_quota(make_config(cluster_name, num_nodes=2))
    with pytest.raises(QuotaError):
        provider.check_quota(make_config(cluster_name, num_nodes=3))


def test_spot_uses_the_spot_quota(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    front.set_quota("L-1216C47A", 0)
    front.set_quota("L-34B43A08", 64)
    provider.check_quota(make_config(cluster_name, use_spot=True))
    front.set_quota("L-34B43A08", 0)
    with pytest.raises(QuotaError):
        provider.check_quota(make_config(cluster_name, use_spot=True))


def test_a_quota_moto_does_not_know_passes(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    provider.check_quota(make_config(cluster_name))  # moto: NoSuchResourceException
    assert [c.outcome for c in front.calls("GetServiceQuota")] == ["moto"]


def test_a_quota_we_may_not_read_passes(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    front.fail("GetServiceQuota", "AccessDeniedException")
    provider.check_quota(make_config(cluster_name))


def test_rejected_credentials_at_the_quota_check_are_an_auth_error(
    provider: AWSProvider, cluster_name: str, front: EC2FaultFront
) -> None:
    front.fail("GetServiceQuota", "UnrecognizedClientException")
    with pytest.raises(AuthError):
        provider.check_quota(make_config(cluster_name))
