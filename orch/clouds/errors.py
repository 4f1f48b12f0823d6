"""Typed provisioning errors. Each carries the scope it blocks for failover.

Providers translate their cloud's error codes into these; activities turn them into
``ApplicationError(type=<class name>)`` and the failover rules (pure code) turn the
scope into block entries.
"""

from __future__ import annotations

from enum import StrEnum


class BlockScope(StrEnum):
    """How much of the search space a failure rules out."""

    NONE = "none"  # retry the same place (transient)
    ZONE = "zone"
    REGION = "region"
    CLOUD = "cloud"


class ProvisionError(Exception):
    """A cloud call failed. ``code`` is the cloud's own error code (e.g. EC2's
    ``InsufficientInstanceCapacity``); ``scope`` is what failover should block."""

    scope: BlockScope = BlockScope.ZONE
    retryable: bool = True

    def __init__(self, message: str, *, code: str = "", scope: BlockScope | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        if scope is not None:
            self.scope = scope

    def __reduce__(self):  # keep code and scope across pickling (Ray, multiprocessing)
        return (_rebuild, (type(self), self.message, self.code, self.scope))


def _rebuild(cls: type[ProvisionError], message: str, code: str, scope: BlockScope):
    return cls(message, code=code, scope=scope)


class CapacityError(ProvisionError):
    """No capacity for the instance type here: block the zone (or region)."""

    scope = BlockScope.ZONE


class QuotaError(ProvisionError):
    """A quota would be exceeded: block the region, or the whole cloud when global."""

    scope = BlockScope.REGION


class AuthError(ProvisionError):
    """Credentials missing or rejected: block the cloud; retrying cannot help."""

    scope = BlockScope.CLOUD
    retryable = False


class InvalidConfigError(ProvisionError):
    """The request cannot succeed on this cloud (bad image, missing network...)."""

    scope = BlockScope.CLOUD
    retryable = False


class TransientError(ProvisionError):
    """Throttling or a passing fault: retry the same call with backoff."""

    scope = BlockScope.NONE


class SetupError(Exception):
    """The user's setup commands failed. ``tail`` holds the last lines of output."""

    def __init__(self, message: str, tail: str = ""):
        super().__init__(message)
        self.tail = tail


ERROR_TYPES: dict[str, type[ProvisionError]] = {
    cls.__name__: cls
    for cls in (ProvisionError, CapacityError, QuotaError, AuthError, InvalidConfigError,
                TransientError)
}
