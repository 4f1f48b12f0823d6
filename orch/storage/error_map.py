"""From a service's error code to one of :mod:`orch.storage.errors`, with a message a user
can act on that keeps the code. Each store lists its service's codes in a
:class:`CodeMap`; the wording is shared so every store says the same thing the same way."""

from __future__ import annotations

from dataclasses import dataclass

from orch.storage.errors import AccessDenied, BadName, NameTaken, NoSuchBucket, StorageError


@dataclass(frozen=True)
class CodeMap:
    service: str  # as a user names it: "S3", "GCS", "Azure Blob"
    no_such_bucket: frozenset[str]
    access_denied: frozenset[str]
    name_taken: frozenset[str]
    bad_name: frozenset[str]
    transient: frozenset[str]


def storage_error(codes: CodeMap, bucket: str, code: str, status: int | None,
                  detail: str) -> StorageError:
    """The error for ``code`` (``status``: the HTTP status, for codes no set names: 429 and
    5xx are worth retrying, anything else is not)."""
    where = f"{codes.service} bucket {bucket}"
    said = f" ({code}): {detail}" if detail else f" ({code})"
    if code in codes.no_such_bucket:
        return NoSuchBucket(f"{where} does not exist{said}", code=code)
    if code in codes.access_denied:
        return AccessDenied(f"{codes.service} refused access to bucket {bucket}{said}; check "
                            "the credentials and the bucket's permissions", code=code)
    if code in codes.name_taken:
        return NameTaken(f"{where} belongs to another account{said}; bucket names are "
                         "global, choose another name", code=code)
    if code in codes.bad_name:
        return BadName(f"{codes.service} refused the bucket name {bucket!r}{said}", code=code)
    if code in codes.transient or status == 429 or (status or 0) >= 500:
        return StorageError(f"{where}: {codes.service} is unavailable for now{said}",
                            code=code, retryable=True)
    return StorageError(f"{where}: {codes.service} refused the request{said}", code=code,
                        retryable=False)


def unreachable(service: str, bucket: str, error: Exception) -> StorageError:
    """No answer at all (connection refused, timeout): worth another attempt."""
    return StorageError(f"cannot reach {service} for bucket {bucket}: {error}",
                        code="Unreachable", retryable=True)


def no_credentials(service: str, bucket: str, how: str) -> AccessDenied:
    return AccessDenied(f"no {service} credentials to reach bucket {bucket}: {how}",
                        code="NoCredentials")
