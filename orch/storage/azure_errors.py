"""Azure Blob's error codes (the ``x-ms-error-code`` header; https://learn.microsoft.com/
en-us/rest/api/storageservices/blob-service-error-codes and common-rest-api-error-codes)
as orch's storage errors. azure-core raises ``HttpResponseError`` (and subclasses) with
``error_code`` and ``status_code``; no answer at all is a ``ServiceRequestError``.

Container names are per storage account, so Azure has no "taken by another owner":
``ContainerAlreadyExists`` is the account's own container (:meth:`create` returns False).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from orch.storage.error_map import CodeMap, no_credentials, storage_error, unreachable
from orch.storage.errors import StorageError

AZURE_CODES = CodeMap(
    service="Azure Blob",
    no_such_bucket=frozenset({"ContainerNotFound"}),
    access_denied=frozenset({
        "AuthenticationFailed", "AuthorizationFailure", "AuthorizationPermissionMismatch",
        "AuthorizationSourceIPMismatch", "AuthorizationProtocolMismatch",
        "AuthorizationResourceTypeMismatch", "AuthorizationServiceMismatch",
        "InsufficientAccountPermissions", "AccountIsDisabled", "KeyBasedAuthenticationNotPermitted",
        "NoAuthenticationInformation", "InvalidAuthenticationInfo",
    }),
    name_taken=frozenset(),
    bad_name=frozenset({"InvalidResourceName", "OutOfRangeInput"}),
    transient=frozenset({"ContainerBeingDeleted", "ServerBusy", "InternalError",
                         "OperationTimedOut", "ContainerBeingDisabled"}),
)


def error_code(error: HttpResponseError) -> str:
    """The ``x-ms-error-code`` (azure-storage-blob sets ``error_code``, sometimes as an
    enum), else the HTTP status."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or error.status_code or "")


def from_http_error(container: str, error: HttpResponseError) -> StorageError:
    detail = str(error.message or error.reason or "").split("\n")[0]
    return storage_error(AZURE_CODES, container, error_code(error), error.status_code, detail)


@contextmanager
def azure_errors(container: str) -> Iterator[None]:
    try:
        yield
    except ClientAuthenticationError as e:
        if e.status_code:  # the service refused the request's key or token
            raise from_http_error(container, e) from e
        raise no_credentials("Azure", container, f"{e.message.splitlines()[0]} (set "
                             "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_KEY, or sign "
                             "in with az login)") from e
    except HttpResponseError as e:
        raise from_http_error(container, e) from e
    except (ServiceRequestError, ServiceResponseError) as e:
        raise unreachable("Azure Blob", container, e) from e
