"""Compute Engine errors turned into orch's typed provisioning errors.

Google reports a failure in two shapes, and both must be read the same way:

* synchronously, as an HTTP error whose JSON body is
  ``{"error": {"code": 403, "message": ..., "errors": [{"reason": "quotaExceeded"}],
  "status": "PERMISSION_DENIED"}}``;
* asynchronously, inside a finished zonal/global Operation as
  ``operation["error"]["errors"] = [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": ...}]``
  (an insert is accepted, and fails minutes later).

The code → scope rules follow SkyPilot's ``FailoverCloudErrorHandlerV2._gcp_handler``:
capacity blocks the zone, regional quota the region, global quota and configuration or
permission problems the whole cloud.
"""

from __future__ import annotations

import json
import re
from typing import Any

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

_CAPACITY = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "insufficientCapacity",
    "RESOURCE_NOT_FOUND",  # SkyPilot issue 1797: the zone is most likely out of capacity
    "resourceNotReady",
    "RESOURCE_NOT_READY",  # the instance is still stopping
    "UNSUPPORTED_OPERATION",  # observed when a spot VM is preempted during creation
})
_QUOTA = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
_AUTH = frozenset({
    "IAM_PERMISSION_DENIED",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "authError",
    "forbidden",
    "accessNotConfigured",
    "SERVICE_DISABLED",
})
_INVALID = frozenset({
    "VPC_NOT_FOUND",  # networks are global: no region can succeed
    "invalid",
    "badRequest",
    "invalidParameter",
    "required",
    "INVALID_ARGUMENT",
})
_INVALID_IN_REGION = frozenset({"SUBNET_NOT_FOUND_FOR_VPC"})
_TRANSIENT = frozenset({
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
    "RESOURCE_OPERATION_RATE_EXCEEDED",
    "backendError",
    "internalError",
    "INTERNAL",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
})

# A quota error names its metric: "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-west1."
_QUOTA_METRIC = re.compile(r"Quota '([A-Z0-9_]+)' exceeded")
GLOBAL_QUOTA_METRICS = frozenset({"GPUS_ALL_REGIONS"})

_SCOPE_ORDER = (BlockScope.NONE, BlockScope.ZONE, BlockScope.REGION, BlockScope.CLOUD)


def quota_error(metric: str, message: str, code: str = "QUOTA_EXCEEDED") -> QuotaError:
    """A QuotaError for ``metric``; project-wide metrics block the whole cloud."""
    is_global = metric in GLOBAL_QUOTA_METRICS or "globally" in message
    return QuotaError(message, code=code,
                      scope=BlockScope.CLOUD if is_global else BlockScope.REGION)


def _known(code: str, message: str) -> ProvisionError | None:
    """The typed error for a code orch recognises, else None."""
    if code in _QUOTA:
        match = _QUOTA_METRIC.search(message)
        return quota_error(match.group(1) if match else "", message, code)
    if code in _CAPACITY or "is not found or access is unauthorized" in message:
        # The second: a zone this project may not use ("Location us-east1-d is not found...").
        return CapacityError(message, code=code)
    if code in _AUTH:
        return AuthError(message, code=code)
    if code in _INVALID:
        return InvalidConfigError(message, code=code)
    if code in _INVALID_IN_REGION:
        return InvalidConfigError(message, code=code, scope=BlockScope.REGION)
    if code in _TRANSIENT:
        return TransientError(message, code=code)
    return None


def widest(errors: list[ProvisionError]) -> ProvisionError:
    """Several errors at once: the one that rules out the most wins."""
    return max(errors, key=lambda e: _SCOPE_ORDER.index(e.scope))


def _by_status(status: int, code: str, message: str) -> ProvisionError:
    if status == 403:
        return AuthError(message, code=code or "PERMISSION_DENIED")
    if status == 404:
        return CapacityError(message, code=code or "RESOURCE_NOT_FOUND")
    if status == 429 or status >= 500:
        return TransientError(message, code=code or str(status))
    if status == 400:
        return InvalidConfigError(message, code=code or "badRequest")
    return ProvisionError(message, code=code or str(status))


def http_error_body(err: HttpError) -> dict[str, Any]:
    """The ``error`` object of Google's JSON error body ({} when the body is not JSON)."""
    try:
        data = json.loads(err.content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    body = data.get("error") if isinstance(data, dict) else None
    return body if isinstance(body, dict) else {}


def http_error_reasons(err: HttpError) -> list[str]:
    """The machine-readable reasons in the body, most specific first: errors[].reason,
    then ErrorInfo reasons, then the canonical status (PERMISSION_DENIED...)."""
    body = http_error_body(err)
    reasons = [e.get("reason", "") for e in body.get("errors", []) if isinstance(e, dict)]
    reasons += [d.get("reason", "") for d in body.get("details", []) if isinstance(d, dict)]
    reasons.append(body.get("status", ""))
    return [r for r in reasons if r]


def from_http_error(err: HttpError) -> ProvisionError:
    status = int(err.resp.status)
    message = http_error_body(err).get("message") or err.reason or f"HTTP {status}"
    reasons = http_error_reasons(err)
    if status == 401:  # whatever the reason ("required", "authError"), the caller is unknown
        return AuthError(message, code=reasons[0] if reasons else "UNAUTHENTICATED")
    # The first recognised reason decides: a specific one (quotaExceeded) is more telling
    # than the generic status that comes with it (PERMISSION_DENIED).
    for code in reasons:
        known = _known(code, message)
        if known is not None:
            return known
    return _by_status(status, reasons[0] if reasons else "", message)


def operation_errors(operation: dict[str, Any]) -> list[dict[str, Any]]:
    """``operation.error.errors[]`` of a finished Operation ([] when it succeeded)."""
    error = operation.get("error") or {}
    return [e for e in error.get("errors", []) if isinstance(e, dict)]


def from_operation(operation: dict[str, Any]) -> ProvisionError:
    """The typed error for a DONE operation that carries ``error.errors[]``."""
    errors = operation_errors(operation)
    found: list[ProvisionError] = []
    for entry in errors:
        code, message = str(entry.get("code", "")), str(entry.get("message", ""))
        # Unknown codes block the zone, as SkyPilot does for errors it cannot parse.
        found.append(_known(code, message) or ProvisionError(message or code, code=code))
    if found:
        return widest(found)
    status = int(operation.get("httpErrorStatusCode") or 0)
    return _by_status(status, "", str(operation.get("httpErrorMessage") or "operation failed"))
