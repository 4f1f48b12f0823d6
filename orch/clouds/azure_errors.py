"""Azure's errors, translated into orch's typed provisioning errors.

ARM reports a failure in one of two shapes, and both carry ``{"code", "message"}``: the
HTTP answer to a request (``HttpResponseError.error``), or a long-running operation that
ends ``{"status": "Failed", "error": {...}}`` (the SDK poller raises an
``HttpResponseError`` whose ``error`` is parsed from that body). A VM whose creation failed
also keeps the code in its instance view (``ProvisioningState/failed/<code>``), so the
classification works from a bare code and message.

The code table (``_ERROR_TYPES``) is the one place that says which ARM code blocks what.
SkyPilot's Azure handler blocks the cloud for a read-only subscription or rejected
credentials and the region (for that instance type) for anything else; orch is finer where
ARM says more: an allocation failure blocks the zone when the request named one
(``ZonalAllocationFailed`` always does), else the region; a quota the region; credentials,
permissions or a request Azure cannot serve the cloud. A code the table does not know is
treated as an allocation failure. On top of the codes, what only the transport knows: HTTP
429 and 5xx, or no connection, are transient; ``ClientAuthenticationError`` (a 401, or a
credential that got no token) is an auth error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from orch.clouds.errors import (
    AuthError,
    BlockScope,
    CapacityError,
    InvalidConfigError,
    ProvisionError,
    QuotaError,
    TransientError,
)

# ARM error code → the typed error it becomes, with that type's scope (quota: the region;
# auth and config: the cloud; transient: none), except capacity: see classify.
_ERROR_TYPES: dict[str, type[ProvisionError]] = {
    **dict.fromkeys(("ZonalAllocationFailed", "AllocationFailed",
                     "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest",
                     "SkuNotAvailable"), CapacityError),
    "QuotaExceeded": QuotaError,
    **dict.fromkeys(("ReadOnlyDisabledSubscription", "AuthorizationFailed",
                     "ClientAuthenticationError", "InvalidAuthenticationToken",
                     "AuthenticationFailed", "ExpiredAuthenticationToken",
                     "InvalidAuthenticationTokenTenant", "LinkedAuthorizationFailed",
                     "SubscriptionNotFound"), AuthError),
    **dict.fromkeys(("InvalidParameter", "InvalidRequestContent", "InvalidResourceName",
                     "InvalidResourceReference", "MissingSubscriptionRegistration",
                     "ImageNotFound", "PlatformImageNotFound"), InvalidConfigError),
    # ReferencedResourceNotProvisioned: a resource named one still being made (orch makes
    # the network in layers so as not to; should it race, the same call soon succeeds).
    **dict.fromkeys(("TooManyRequests", "InternalServerError", "ServiceUnavailable",
                     "ReferencedResourceNotProvisioned"), TransientError),
}
ABSENT_CODES = frozenset({"ResourceGroupNotFound", "ResourceNotFound", "NotFound"})


def is_absent(err: ResourceNotFoundError) -> bool:
    """A 404 because the resource (or its group) is not there, as opposed to one for an
    unknown subscription, which must not read as "no cluster"."""
    return bool(err.error and err.error.code in ABSENT_CODES)


def classify(
    code: str, message: str, *, status: int | None, region: str, zone: str | None
) -> ProvisionError:
    """The typed error for an ARM error ``code`` (and the HTTP ``status``, when known)."""
    where = f"{region}/{zone}" if zone else region
    text = f"Azure {where}: {code or 'error'}: {message}"
    if status is not None and (status == 429 or status >= 500):
        return TransientError(text, code=code or str(status))
    if code == "OperationNotAllowed" and "quota" in message.lower():
        # "Operation could not be completed as it results in exceeding approved ... quota."
        return QuotaError(text, code=code)
    error_type = _ERROR_TYPES.get(code, CapacityError)
    if error_type is not CapacityError:
        return error_type(text, code=code)
    # Allocation failures, and codes the table does not know: the zone asked for, else the
    # region (ARM then already looked for capacity in all of it).
    zonal = zone is not None or code == "ZonalAllocationFailed"
    return CapacityError(text, code=code, scope=BlockScope.ZONE if zonal else BlockScope.REGION)


def translate(err: AzureError, *, region: str, zone: str | None = None) -> ProvisionError:
    """The typed error for an exception raised by the Azure SDK or azure-identity."""
    if isinstance(err, ClientAuthenticationError):
        # A 401 from ARM, or a credential that could not get a token at all.
        code = (err.error.code if err.error else None) or "ClientAuthenticationError"
        return AuthError(f"Azure credentials rejected: {err.message}", code=code)
    if isinstance(err, HttpResponseError):
        code = (err.error.code if err.error else None) or ""
        message = (err.error.message if err.error else None) or err.message
        return classify(code, message or "", status=err.status_code, region=region,
                        zone=zone)
    if isinstance(err, ServiceRequestError | ServiceResponseError):
        return TransientError(f"Azure {region}: cannot reach ARM: {err.message}",
                              code=type(err).__name__)
    return ProvisionError(f"Azure {region}: {err.message}", code=type(err).__name__,
                          scope=BlockScope.REGION)


@contextmanager
def translated(region: str, zone: str | None = None) -> Iterator[None]:
    """Re-raise the Azure SDK's exceptions raised inside as orch's typed errors."""
    try:
        yield
    except AzureError as err:
        raise translate(err, region=region, zone=zone) from err
