"""Cloud Storage's JSON API errors (https://cloud.google.com/storage/docs/json_api/v1/
status-codes) as orch's storage errors. google-cloud-storage raises api_core exceptions
carrying the HTTP status and the ``errors[].reason`` (``notFound``, ``forbidden``...);
the resumable-upload layer raises its own ``InvalidResponse`` with the bare response.

A 409 means "name taken" only when creating a bucket, and a 400 "bad name" only then:
:meth:`GCSStore.create` decides those itself; elsewhere they are refusals."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import requests
from google.api_core.exceptions import GoogleAPICallError
from google.auth.exceptions import GoogleAuthError, TransportError
from google.resumable_media.common import DataCorruption, InvalidResponse

from orch.clouds.errors import AuthError
from orch.storage.error_map import CodeMap, no_credentials, storage_error, unreachable
from orch.storage.errors import StorageError

GCS_CODES = CodeMap(
    service="GCS",
    no_such_bucket=frozenset({"notFound", "404"}),
    access_denied=frozenset({"forbidden", "accessDenied", "403", "unauthorized", "required",
                             "authError", "401", "userProjectMissing", "accountDisabled"}),
    name_taken=frozenset(),
    bad_name=frozenset(),
    transient=frozenset({"rateLimitExceeded", "backendError", "internalError",
                         "serviceUnavailable", "429", "500", "502", "503", "504"}),
)


def code_of(error: GoogleAPICallError) -> str:
    """The first ``errors[].reason`` when the service gave one (an emulator may not),
    else the HTTP status."""
    reasons = [e.get("reason") for e in error.errors or () if isinstance(e, dict)]
    return next((r for r in reasons if r), str(error.code))


def from_api_error(bucket: str, error: GoogleAPICallError) -> StorageError:
    return storage_error(GCS_CODES, bucket, code_of(error), error.code, error.message)


@contextmanager
def gcs_errors(bucket: str) -> Iterator[None]:
    try:
        yield
    except GoogleAPICallError as e:
        raise from_api_error(bucket, e) from e
    except InvalidResponse as e:
        status = getattr(e.response, "status_code", None)
        raise storage_error(GCS_CODES, bucket, str(status), status, str(e.args[0])) from e
    except DataCorruption as e:
        raise StorageError(f"GCS bucket {bucket}: the upload arrived corrupted ({e}); it is "
                           "sent again on the next attempt", code="DataCorruption",
                           retryable=True) from e
    except AuthError as e:  # orch's credential loader found none
        raise no_credentials("GCP", bucket, e.message) from e
    except (TransportError, requests.ConnectionError, requests.Timeout) as e:
        raise unreachable("GCS", bucket, e) from e
    except GoogleAuthError as e:
        raise no_credentials("GCP", bucket, f"the credentials were refused: {e}") from e
