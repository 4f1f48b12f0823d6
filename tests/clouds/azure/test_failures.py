"""Azure failures, as ARM reports them (an HTTP error, or a long-running operation that
ends Failed), become orch's typed errors with the right failover scope."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError

from orch.clouds.azure import AzureProvider
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
from tests.clouds.azure.support import StaticToken, config
from tests.clouds.waits import provisioned, settle, wait_instances
from tests.fakes.azure_arm_fake import AzureArmFake

CREATE_VM = "VirtualMachines_CreateOrUpdate"


@pytest.mark.parametrize(
    ("code", "zone", "in_operation", "scope"),
    [
        ("ZonalAllocationFailed", "2", True, BlockScope.ZONE),
        ("ZonalAllocationFailed", "2", False, BlockScope.ZONE),
        ("AllocationFailed", None, True, BlockScope.REGION),
        ("AllocationFailed", None, False, BlockScope.REGION),
        ("OverconstrainedAllocationRequest", "1", True, BlockScope.ZONE),
        ("SkuNotAvailable", None, False, BlockScope.REGION),
    ],
)
def test_capacity_errors(
    provider: AzureProvider, fake: AzureArmFake, code: str, zone: str | None,
    in_operation: bool, scope: BlockScope,
) -> None:
    fake.inject_fault(CREATE_VM, code, "no capacity for Standard_D2s_v3", zone=zone,
                      in_operation=in_operation)

    with pytest.raises(CapacityError) as caught:
        provisioned(provider, config("c1", 2, zone=zone))

    assert caught.value.code == code and caught.value.scope == scope
    assert code in caught.value.message
    if in_operation:  # the VM exists, Failed, and says why
        with pytest.raises(CapacityError) as waited:
            wait_instances(provider, "eastus", "c1", InstanceStatus.RUNNING)
        assert waited.value.code == code and waited.value.scope == scope
    # a retry creates what is missing or failed, nothing else
    assert provisioned(provider, config("c1", 2, zone=zone)).created_instance_ids == [
        "c1-head"]
    wait_instances(provider, "eastus", "c1", InstanceStatus.RUNNING)


def test_zonal_fault_only_hits_its_zone(provider: AzureProvider, fake: AzureArmFake) -> None:
    fake.inject_fault(CREATE_VM, "ZonalAllocationFailed", zone="2", in_operation=True, times=5)
    provisioned(provider, config("c1", 2, zone="3"))
    with pytest.raises(CapacityError):
        provisioned(provider, config("c2", 1, zone="2"))


def test_allocation_failure_on_start(provider: AzureProvider, fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 1))
    settle(provider, "eastus", "c1", provider.stop_instances("eastus", "c1"))
    fake.inject_fault("VirtualMachines_Start", "AllocationFailed", in_operation=True)

    with pytest.raises(CapacityError) as caught:
        provisioned(provider, config("c1", 1))
    assert caught.value.scope == BlockScope.REGION
    assert fake.power_state("c1-head") == "deallocated"
    # the VM is started again, not created again
    record = provisioned(provider, config("c1", 1))
    assert record.resumed_instance_ids == ["c1-head"] and record.created_instance_ids == []
    assert fake.power_state("c1-head") == "running"


def test_a_failed_deallocate_is_seen_on_the_vm(provider: AzureProvider,
                                               fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 1))
    fake.inject_fault("VirtualMachines_Deallocate", "AllocationFailed", in_operation=True)

    operations = provider.stop_instances("eastus", "c1")  # accepted: it fails later
    with pytest.raises(CapacityError) as caught:
        settle(provider, "eastus", "c1", operations)
    assert caught.value.code == "AllocationFailed"


def test_a_resource_group_whose_delete_failed_is_reported(provider: AzureProvider,
                                                          fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 1))
    fake.inject_fault("ResourceGroups_Delete", "ResourceGroupDeletionBlocked",
                      in_operation=True)

    operations = provider.terminate_instances("eastus", "c1")
    (delete,) = operations
    assert delete.name.startswith("operationresults/")  # no subscription id in a history
    with pytest.raises(ProvisionError) as caught:
        settle(provider, "eastus", "c1", operations)
    assert caught.value.code == "ResourceGroupDeletionBlocked"  # ARM's own, as its poller's
    assert caught.value.scope == BlockScope.REGION
    assert fake.resource_groups() == ["orch-c1-eastus"]
    settle(provider, "eastus", "c1", provider.terminate_instances("eastus", "c1"))  # again
    assert fake.resource_groups() == []


def test_a_delete_whose_record_expired_is_followed_on_the_group(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    provisioned(provider, config("c1", 1))
    operations = provider.terminate_instances("eastus", "c1")
    fake.records_expired = True

    settle(provider, "eastus", "c1", operations)

    assert fake.resource_groups() == []


def test_family_quota_checked_before_any_vm_is_created(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    fake.set_limit("eastus", "standardDSv3Family", 2)

    with pytest.raises(QuotaError) as caught:
        provider.check_quota(config("c1", 2))

    assert caught.value.scope == BlockScope.REGION
    assert "Standard DSv3 Family vCPUs" in caught.value.message
    assert fake.count(CREATE_VM) == 0 and fake.resource_groups() == []
    provider.check_quota(config("c1", 1))


def test_regional_and_spot_quotas(provider: AzureProvider, fake: AzureArmFake) -> None:
    fake.set_limit("eastus", "cores", 6)
    fake.set_limit("eastus", "lowPriorityCores", 2)
    with pytest.raises(QuotaError, match="Total Regional vCPUs"):
        provider.check_quota(config("c1", 4))
    with pytest.raises(QuotaError, match="Low-priority"):
        provider.check_quota(config("c1", 2, use_spot=True))
    provider.check_quota(config("c1", 1, use_spot=True))
    provider.check_quota(config("c1", 4, region="westus2"))


def test_quota_counts_only_the_vms_still_missing(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    fake.set_limit("eastus", "standardDSv3Family", 4)
    provisioned(provider, config("c1", 1))  # 2 of 4 vCPUs in use

    provider.check_quota(config("c1", 2))  # one more VM: 4 of 4
    with pytest.raises(QuotaError):
        provider.check_quota(config("c1", 3))
    with pytest.raises(QuotaError):
        provider.check_quota(config("c2", 2))


def test_unknown_instance_type_passes_the_quota_check(provider: AzureProvider) -> None:
    provider.check_quota(config("c1", 2, instance_type="Standard_Imaginary_v9"))


def test_quota_refused_at_creation(provider: AzureProvider, fake: AzureArmFake) -> None:
    fake.set_limit("eastus", "standardDSv3Family", 2)
    with pytest.raises(QuotaError) as caught:
        provisioned(provider, config("c1", 2))
    assert caught.value.code == "OperationNotAllowed"
    assert caught.value.scope == BlockScope.REGION


def test_rejected_token(fake: AzureArmFake) -> None:
    provider = AzureProvider(credential=StaticToken("not-the-token"))
    with pytest.raises(AuthError) as caught:
        provisioned(provider, config())
    assert caught.value.code == "InvalidAuthenticationToken"
    assert caught.value.scope == BlockScope.CLOUD and not caught.value.retryable
    assert fake.resource_groups() == []


class _NoLogin:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")


def test_credential_that_cannot_get_a_token(fake: AzureArmFake) -> None:
    provider = AzureProvider(credential=_NoLogin())
    with pytest.raises(AuthError) as caught:
        provider.query_instances("eastus", "c1")
    assert caught.value.code == "ClientAuthenticationError"
    ok, reason = provider.credentials_ok()
    assert not ok and "failed to retrieve a token" in reason


@pytest.mark.parametrize(
    ("code", "status"),
    [("AuthorizationFailed", 403), ("ReadOnlyDisabledSubscription", 409)],
)
def test_authorization_errors(
    provider: AzureProvider, fake: AzureArmFake, code: str, status: int
) -> None:
    fake.inject_fault("ResourceGroups_CreateOrUpdate", code, status=status)
    with pytest.raises(AuthError) as caught:
        provisioned(provider, config())
    assert caught.value.code == code and caught.value.scope == BlockScope.CLOUD


def test_unknown_subscription(fake: AzureArmFake) -> None:
    provider = AzureProvider(credential=StaticToken(fake.token), subscription_id="0000")
    with pytest.raises(AuthError) as caught:
        provider.query_instances("eastus", "c1")
    assert caught.value.code == "SubscriptionNotFound"


@pytest.mark.parametrize(("code", "status"), [("TooManyRequests", 429), ("ServerBusy", 503)])
def test_throttling_and_server_errors_are_transient(
    provider: AzureProvider, fake: AzureArmFake, code: str, status: int
) -> None:
    fake.inject_fault("VirtualMachines_List", code, status=status)
    with pytest.raises(TransientError) as caught:
        provider.query_instances("eastus", "c1")
    assert caught.value.code == code and caught.value.scope == BlockScope.NONE
    assert fake.count("VirtualMachines_List") == 1  # no retry hidden inside the call
    assert provider.query_instances("eastus", "c1") == {}


def test_unreachable_endpoint_is_transient(fake: AzureArmFake) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    provider = AzureProvider(credential=StaticToken(fake.token),
                             endpoint=f"https://127.0.0.1:{closed_port}")
    with pytest.raises(TransientError):
        provider.query_instances("eastus", "c1")


def test_invalid_config_fails_before_anything_is_created(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    with pytest.raises(InvalidConfigError, match="SSH public key"):
        provisioned(provider, config(ssh_public_key=None))
    with pytest.raises(InvalidConfigError, match="publisher:offer:sku:version"):
        provisioned(provider, config(image_id="ubuntu"))
    assert fake.resource_groups() == [] and fake.count(CREATE_VM) == 0


def test_vm_size_refused_by_azure(provider: AzureProvider) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        provisioned(provider, config(instance_type="Standard_Imaginary_v9"))
    assert caught.value.code == "InvalidParameter"

