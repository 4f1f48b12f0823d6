"""ARM error codes (and HTTP statuses) classified into orch's typed errors with the scope
failover must block: the Azure code table of orch.clouds.azure_errors."""

from __future__ import annotations

import pytest

from orch.clouds.azure_errors import classify
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    ProvisionError,
    QuotaError,
    TransientError,
)

# What ARM says when a VM would exceed a vCPU quota (409, code OperationNotAllowed).
QUOTA_REFUSAL = (
    "Operation could not be completed as it results in exceeding approved "
    "standardNDASv4_A100Family Cores quota. Additional details - Deployment Model: Resource "
    "Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 96, "
    "(Minimum) New Limit Required: 96.")
# A failed long-running operation reaches the SDK as the final poll's answer: HTTP 200.
OPERATION = 200


@pytest.mark.parametrize(
    ("code", "message", "status", "zone", "expected", "scope"),
    [
        # capacity: the zone asked for, else the region; ZonalAllocationFailed always a zone
        ("ZonalAllocationFailed", "", OPERATION, "2", CapacityError, BlockScope.ZONE),
        ("ZonalAllocationFailed", "", OPERATION, None, CapacityError, BlockScope.ZONE),
        ("AllocationFailed", "", OPERATION, "3", CapacityError, BlockScope.ZONE),
        ("AllocationFailed", "", OPERATION, None, CapacityError, BlockScope.REGION),
        ("AllocationFailed", "", None, None, CapacityError, BlockScope.REGION),
        ("OverconstrainedAllocationRequest", "", OPERATION, None, CapacityError,
         BlockScope.REGION),
        ("OverconstrainedZonalAllocationRequest", "", OPERATION, "1", CapacityError,
         BlockScope.ZONE),
        ("SkuNotAvailable", "The requested size for resource is currently not available in "
         "location 'eastus'.", 409, None, CapacityError, BlockScope.REGION),
        # quota: the region, whether or not a zone was asked for
        ("QuotaExceeded", "", 409, None, QuotaError, BlockScope.REGION),
        ("QuotaExceeded", "", 409, "1", QuotaError, BlockScope.REGION),
        ("OperationNotAllowed", QUOTA_REFUSAL, 409, None, QuotaError, BlockScope.REGION),
        ("OperationNotAllowed", "exceeding approved Total Regional Cores quota", 409, "1",
         QuotaError, BlockScope.REGION),
        # credentials and permissions: the cloud
        ("ReadOnlyDisabledSubscription", "", 409, None, AuthError, BlockScope.CLOUD),
        ("AuthorizationFailed", "", 403, None, AuthError, BlockScope.CLOUD),
        ("ClientAuthenticationError", "", None, None, AuthError, BlockScope.CLOUD),
        ("InvalidAuthenticationToken", "", 401, None, AuthError, BlockScope.CLOUD),
        ("ExpiredAuthenticationToken", "", 401, None, AuthError, BlockScope.CLOUD),
        ("SubscriptionNotFound", "", 404, None, AuthError, BlockScope.CLOUD),
        # a request Azure cannot serve anywhere: the cloud
        ("MissingSubscriptionRegistration", "", 409, None, InvalidConfigError,
         BlockScope.CLOUD),
        ("InvalidParameter", "", 400, "1", InvalidConfigError, BlockScope.CLOUD),
        ("PlatformImageNotFound", "", 404, None, InvalidConfigError, BlockScope.CLOUD),
        # transient, by code (a failed operation, or an instance view) or by HTTP status
        ("TooManyRequests", "", None, None, TransientError, BlockScope.NONE),
        ("InternalServerError", "", OPERATION, None, TransientError, BlockScope.NONE),
        ("ServiceUnavailable", "", None, "2", TransientError, BlockScope.NONE),
        ("ServerBusy", "", 503, "1", TransientError, BlockScope.NONE),
        ("InternalExecutionError", "", 500, None, TransientError, BlockScope.NONE),
        ("ReferencedResourceNotProvisioned", "", 400, None, TransientError, BlockScope.NONE),
        # unknown failures are treated as allocation failures (SkyPilot blocks the region)
        ("SomethingNew", "", 409, None, CapacityError, BlockScope.REGION),
        ("OperationNotAllowed", "VM is marked for deletion", 409, None, CapacityError,
         BlockScope.REGION),
        ("OperationNotAllowed", "VM is marked for deletion", 409, "2", CapacityError,
         BlockScope.ZONE),
    ],
)
def test_classify(
    code: str, message: str, status: int | None, zone: str | None,
    expected: type[ProvisionError], scope: BlockScope,
) -> None:
    error = classify(code, message, status=status, region="eastus", zone=zone)
    assert type(error) is expected
    assert error.scope == scope and error.code == code
    where = f"eastus/{zone}" if zone else "eastus"
    assert error.message == f"Azure {where}: {code}: {message}"


def test_a_status_without_a_code_is_named_by_the_status() -> None:
    error = classify("", "", status=502, region="eastus", zone=None)
    assert type(error) is TransientError and error.code == "502"
