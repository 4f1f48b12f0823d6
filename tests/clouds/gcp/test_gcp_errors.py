"""Google's two error shapes — HTTP error bodies and errors inside a finished operation —
classified into orch's typed errors with the scope failover must block."""

from __future__ import annotations

import json
from typing import Any

import httplib2
import pytest
from googleapiclient.errors import HttpError

from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    ProvisionError,
    QuotaError,
    TransientError,
)
from orch.clouds.gcp_errors import from_http_error, from_operation

REGIONAL_QUOTA = "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."
GLOBAL_QUOTA = "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 1.0 globally."


def http_error(status: int, reason: str | None, message: str, status_name: str = "") -> HttpError:
    body: dict[str, Any] = {"code": status, "message": message}
    if reason:
        body["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    if status_name:
        body["status"] = status_name
    return HttpError(httplib2.Response({"status": status}), json.dumps({"error": body}).encode())


@pytest.mark.parametrize(
    ("status", "reason", "message", "kind", "scope"),
    [
        (403, "quotaExceeded", REGIONAL_QUOTA, QuotaError, BlockScope.REGION),
        (403, "quotaExceeded", GLOBAL_QUOTA, QuotaError, BlockScope.CLOUD),
        (503, "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources",
         CapacityError, BlockScope.ZONE),
        (400, "resourceNotReady", "The resource 'projects/p/zones/z/instances/x' is not ready",
         CapacityError, BlockScope.ZONE),
        (403, "forbidden", "Location us-east1-d is not found or access is unauthorized.",
         CapacityError, BlockScope.ZONE),
        (401, "required", "Request is missing required authentication credential.",
         AuthError, BlockScope.CLOUD),
        (403, "forbidden", "Required 'compute.instances.create' permission",
         AuthError, BlockScope.CLOUD),
        (403, "accessNotConfigured", "Compute Engine API has not been used in project",
         AuthError, BlockScope.CLOUD),
        (403, "rateLimitExceeded", "Rate Limit Exceeded", TransientError, BlockScope.NONE),
        (429, "rateLimitExceeded", "Rate Limit Exceeded", TransientError, BlockScope.NONE),
        (500, "backendError", "Internal error", TransientError, BlockScope.NONE),
        (503, None, "Service Unavailable", TransientError, BlockScope.NONE),
        (400, "invalid", "Invalid value for field 'resource.machineType'",
         InvalidConfigError, BlockScope.CLOUD),
    ],
)
def test_http_errors(status: int, reason: str | None, message: str,
                     kind: type[ProvisionError], scope: BlockScope) -> None:
    err = from_http_error(http_error(status, reason, message))
    assert type(err) is kind
    assert err.scope == scope
    assert err.message == message
    if reason:
        assert err.code == reason


def test_http_error_status_alone_is_read() -> None:
    """No errors[] entry: the canonical status still classifies it."""
    err = from_http_error(http_error(403, None, "denied", "PERMISSION_DENIED"))
    assert type(err) is AuthError
    assert err.code == "PERMISSION_DENIED"


def test_http_error_without_json_body() -> None:
    err = from_http_error(HttpError(httplib2.Response({"status": 502}), b"<html>Bad Gateway"))
    assert type(err) is TransientError


def operation(*errors: tuple[str, str]) -> dict[str, Any]:
    return {
        "kind": "compute#operation", "name": "operation-1", "status": "DONE",
        "error": {"errors": [{"code": code, "message": message} for code, message in errors]},
        "httpErrorStatusCode": 400,
    }


@pytest.mark.parametrize(
    ("code", "message", "kind", "scope"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not "
         "have enough resources available to fulfill the request.", CapacityError,
         BlockScope.ZONE),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "...", CapacityError, BlockScope.ZONE),
        ("insufficientCapacity", "The zone 'projects/p/zones/us-central1-a' does not have "
         "enough resources available to fulfill the request.", CapacityError, BlockScope.ZONE),
        ("RESOURCE_NOT_FOUND", "The resource 'projects/p/zones/z/instances/x' was not found",
         CapacityError, BlockScope.ZONE),
        ("RESOURCE_NOT_READY", "The resource 'projects/p/zones/z/instances/x' is not ready",
         CapacityError, BlockScope.ZONE),
        ("UNSUPPORTED_OPERATION", "The instance 'projects/p/zones/z/instances/x' was "
         "preempted while it was being created.", CapacityError, BlockScope.ZONE),
        ("RESOURCE_OPERATION_RATE_EXCEEDED", "Operation rate exceeded for resource "
         "'projects/p/global/machineImages/img'. Too frequent operations from the source "
         "resource.", TransientError, BlockScope.NONE),
        ("QUOTA_EXCEEDED", REGIONAL_QUOTA, QuotaError, BlockScope.REGION),
        ("QUOTA_EXCEEDED", GLOBAL_QUOTA, QuotaError, BlockScope.CLOUD),
        ("VPC_NOT_FOUND", "The network 'default' was not found", InvalidConfigError,
         BlockScope.CLOUD),
        ("SUBNET_NOT_FOUND_FOR_VPC", "no subnet in region", InvalidConfigError,
         BlockScope.REGION),
        ("IAM_PERMISSION_DENIED", "Required 'iam.serviceAccounts.actAs' permission", AuthError,
         BlockScope.CLOUD),
        ("SOMETHING_NEW", "an error orch has never seen", ProvisionError, BlockScope.ZONE),
    ],
)
def test_operation_errors(code: str, message: str, kind: type[ProvisionError],
                          scope: BlockScope) -> None:
    err = from_operation(operation((code, message)))
    assert type(err) is kind
    assert (err.scope, err.code, err.message) == (scope, code, message)


def test_operation_with_several_errors_blocks_the_widest() -> None:
    err = from_operation(operation(("ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity"),
                                   ("QUOTA_EXCEEDED", GLOBAL_QUOTA)))
    assert type(err) is QuotaError
    assert err.scope == BlockScope.CLOUD
