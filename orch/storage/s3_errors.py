"""S3's error codes (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)
as orch's storage errors. ``HeadBucket`` answers with a bare status, which botocore
reports as the code ``"404"``/``"403"``; those are mapped too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from orch.clouds.aws_errors import client_error_code
from orch.storage.error_map import CodeMap, no_credentials, storage_error, unreachable
from orch.storage.errors import StorageError

S3_CODES = CodeMap(
    service="S3",
    no_such_bucket=frozenset({"NoSuchBucket", "404"}),
    access_denied=frozenset({
        "AccessDenied", "403", "AllAccessDisabled", "AccountProblem", "InvalidAccessKeyId",
        "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
    }),
    name_taken=frozenset({"BucketAlreadyExists"}),
    bad_name=frozenset({"InvalidBucketName"}),
    transient=frozenset({
        "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
        "OperationAborted", "RequestTimeTooSkewed", "Throttling", "503", "500",
    }),
)
_TRANSPORT = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
              ConnectionClosedError)


def from_client_error(bucket: str, error: ClientError) -> StorageError:
    detail = str(error.response.get("Error", {}).get("Message", "") or "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return storage_error(S3_CODES, bucket, client_error_code(error), status, detail)


@contextmanager
def s3_errors(bucket: str) -> Iterator[None]:
    """botocore's exceptions raised inside as storage errors naming ``bucket``."""
    try:
        yield
    except ClientError as e:
        raise from_client_error(bucket, e) from e
    except S3UploadFailedError as e:  # boto3's upload_file wraps the ClientError it caught
        cause = e.__context__
        if isinstance(cause, ClientError):
            raise from_client_error(bucket, cause) from e
        raise StorageError(f"S3 bucket {bucket}: {e}", code="S3UploadFailed") from e
    except (NoCredentialsError, PartialCredentialsError) as e:
        raise no_credentials("AWS", bucket, f"{e} (set AWS_ACCESS_KEY_ID/AWS_PROFILE, or "
                             "cloud_identity on an instance with a role)") from e
    except _TRANSPORT as e:
        raise unreachable("S3", bucket, e) from e
    except BotoCoreError as e:
        raise StorageError(f"S3 bucket {bucket}: {e}", code=type(e).__name__) from e
