"""What a store's failures mean to a user. Each store maps its service's own error codes
(S3's ``NoSuchBucket``, GCS's 404/409, Azure's ``ContainerNotFound``...) to one of these,
keeping the code, so that the CLI can say "bucket my-ckpt is taken by another account"
instead of printing a botocore traceback."""

from __future__ import annotations


class StorageError(Exception):
    """A store call failed. ``code`` is the service's own error code; ``retryable``
    tells the activity layer whether another attempt can help."""

    retryable: bool = True

    def __init__(self, message: str, *, code: str = "", retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        if retryable is not None:  # a plain StorageError that another attempt cannot help
            self.retryable = retryable

    def __reduce__(self):  # keep the code (and retryable) across pickling
        return (type(self), (self.message,), {"code": self.code, "retryable": self.retryable})


class NoSuchBucket(StorageError):
    """The bucket (container) does not exist."""

    retryable = False


class AccessDenied(StorageError):
    """The credentials may not do this to the bucket (or see it at all)."""

    retryable = False


class NameTaken(StorageError):
    """Bucket names are global on S3 and GCS (and per account on Azure): another owner
    has this one."""

    retryable = False


class BadName(StorageError):
    """The name breaks the store's naming rules (caught before any call when possible)."""

    retryable = False
