"""EC2, STS and Service Quotas errors turned into orch's typed provisioning errors.

EC2 answers a failed call with ``<Response><Errors><Error><Code>``; botocore raises it as a
``ClientError`` whose ``response["Error"]["Code"]`` is that code. Failures before any answer
(no credentials, no connection) are botocore exceptions of their own.

The rules follow SkyPilot's failover handler: no capacity blocks the zone (the region when
no zone was asked for, because EC2 then already picked the zone with capacity), a quota the
region, bad credentials or an unusable request the whole cloud; throttling and server faults
are retried.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
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

_CAPACITY = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",  # the instance type is not offered in the requested zone
})
_QUOTA = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"})
_TRANSIENT = frozenset({
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "IncorrectInstanceState",  # e.g. starting an instance that is still stopping
    "DependencyViolation",  # e.g. a security group still held by a terminating instance
})
# Credentials that are missing, wrong or expired: nothing on this cloud can work.
CREDENTIAL_CODES = frozenset({
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
})
_PERMISSION = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
_INVALID = frozenset({
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidParameter",
    "MissingParameter",
    "VPCIdNotSpecified",  # the region has no default VPC
})
_INVALID_PREFIXES = ("InvalidAMIID.", "InvalidKeyPair.", "InvalidBlockDeviceMapping")
# An instance type that one region does not offer is fine in another.
_INVALID_IN_REGION = frozenset({"InvalidInstanceType"})
_TRANSPORT = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
              ConnectionClosedError)
_NO_CREDENTIALS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError)


def client_error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: ClientError | BotoCoreError, *, zone: str | None = None) -> ProvisionError:
    """The typed error for a botocore exception; ``zone`` is the zone the call targeted."""
    message = str(exc)
    if isinstance(exc, _NO_CREDENTIALS):
        return AuthError(f"AWS credentials are missing or unusable: {message}",
                         code=type(exc).__name__)
    if isinstance(exc, _TRANSPORT):
        return TransientError(f"cannot reach the AWS endpoint: {message}")
    if not isinstance(exc, ClientError):
        return ProvisionError(message)
    code = client_error_code(exc)
    if code in _CAPACITY:
        return CapacityError(message, code=code,
                             scope=BlockScope.ZONE if zone else BlockScope.REGION)
    if code in _QUOTA:
        return QuotaError(message, code=code)
    if code in _TRANSIENT:
        return TransientError(message, code=code)
    if code in CREDENTIAL_CODES or code in _PERMISSION:
        return AuthError(message, code=code)
    if code in _INVALID or code.startswith(_INVALID_PREFIXES):
        return InvalidConfigError(message, code=code)
    if code in _INVALID_IN_REGION:
        return InvalidConfigError(message, code=code, scope=BlockScope.REGION)
    # Unknown codes block the zone, as SkyPilot does for errors it cannot parse.
    return ProvisionError(message, code=code)


@contextmanager
def translated(zone: str | None = None) -> Iterator[None]:
    """Raise botocore failures inside the block as orch's typed errors."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, zone=zone) from exc
