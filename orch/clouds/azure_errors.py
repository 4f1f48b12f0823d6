"""Azure's errors, translated into orch's typed provisioning errors.

ARM reports a failure in one of two shapes, and both carry ``{"code", "message"}``: the
HTTP answer to a request (``HttpResponseError.error``), or a long-running operation that
ends ``{"status": "Failed", "error": {...}}`` (the SDK poller raises an
``HttpResponseError`` whose ``error`` is parsed from that body). A VM whose creation failed
also keeps the code in its instance view (``ProvisioningState/failed/<code>``), so the
classification works from a bare code and message.

Which code blocks what is the shared table of :func:`orch.failover_rules.scope_for`
(allocation failures: the zone if one was asked for, else the region; quota: the region;
auth: the cloud). On top of it, what only the transport knows: HTTP 429 and 5xx, or no
connection, are transient; ``ClientAuthenticationError`` (a 401, or a credential that got
no token) is an auth error; and a few codes the shared table does not carry yet.
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
    ERROR_TYPES,
    AuthError,
    BlockScope,
    InvalidConfigError,
    ProvisionError,
    TransientError,
)
from orch.failover_rules import scope_for

# Azure codes missing from orch.failover_rules' table; each blocks the cloud.
_MORE_CODES: dict[str, type[ProvisionError]] = {
    **dict.fromkeys(("AuthenticationFailed", "ExpiredAuthenticationToken",
                     "InvalidAuthenticationTokenTenant", "LinkedAuthorizationFailed",
                     "SubscriptionNotFound"), AuthError),
    **dict.fromkeys(("InvalidParameter", "InvalidRequestContent", "InvalidResourceName",
                     "InvalidResourceReference", "MissingSubscriptionRegistration",
                     "ImageNotFound", "PlatformImageNotFound"), InvalidConfigError),
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
    if code in _MORE_CODES:
        return _MORE_CODES[code](text, code=code)
    error_type, scope = scope_for("azure", code, message, zone_requested=zone is not None)
    return ERROR_TYPES[error_type](text, code=code, scope=scope)


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
