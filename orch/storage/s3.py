"""The S3 store, through boto3.

Endpoint and credentials come from botocore's own chain, as for the AWS provider:
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` (moto's server in tests), keys or a profile,
and the instance role only with the config's ``cloud_identity``. A bucket is made in
``bucket.region``, else the configured region, else us-east-1, which alone takes no
``LocationConstraint``.

Hashes: a single-part object's ETag is its MD5. A multipart one's is not (it is the MD5 of
the parts' MD5s, suffixed ``-N``), so every object orch writes also carries its MD5 in the
``md5chksum`` metadata, base64, as rclone writes it: rclone and orch each recognise the
other's large files. Listing reads that metadata (one HEAD) only for multipart objects.
(With SSE-KMS default encryption an ETag is no MD5 either; such files are sent again.)

Nodes: rclone's ``s3`` backend, ``provider = AWS``. Where the worker's credentials are an
instance or container role (the node is expected to have one too, as SkyPilot's nodes
do), ``env_auth`` and no secret; otherwise the worker's keys, out of band, as SkyPilot
copies ``~/.aws/credentials`` to its nodes.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from boto3.s3.transfer import S3Transfer, TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from orch.clouds.aws_credentials import new_session
from orch.clouds.aws_errors import client_error_code
from orch.settings import load_settings
from orch.storage.base import (
    BucketRef,
    ObjectInfo,
    RcloneRemote,
    StoreKind,
    UploadProgress,
    UploadReport,
)
from orch.storage.errors import AccessDenied, BadName, NoSuchBucket
from orch.storage.names import describe, s3_name_problems
from orch.storage.s3_errors import s3_errors
from orch.storage.upload import (
    DEFAULT_WORKERS,
    LocalFile,
    b64,
    hex_from_b64,
    key_prefix,
    local_files,
    upload_files,
)

log = logging.getLogger(__name__)

MD5_METADATA = "md5chksum"  # rclone's key: x-amz-meta-md5chksum, base64
DEFAULT_REGION = "us-east-1"
_ROLE_METHODS = frozenset({"iam-role", "container-role", "assume-role-with-web-identity"})
_PLAIN_MD5 = re.compile(r"[0-9a-f]{32}")
_CLIENT_CONFIG = Config(retries={"mode": "standard"}, user_agent_extra="orch",
                        max_pool_connections=32)
# Parts left by an upload that was killed cost storage until aborted: S3 aborts them.
_ABORT_STALE_UPLOADS = {"Rules": [{
    "ID": "orch-abort-incomplete-uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
}]}


class S3Store:
    """S3 buckets; see the module docstring. ``part_size`` is both the multipart threshold
    and the part size."""

    kind = StoreKind.S3

    def __init__(self, *, part_size: int = 8 * 1024 * 1024, workers: int = DEFAULT_WORKERS):
        self.part_size = part_size
        self.workers = workers
        self._session = new_session(load_settings().cloud_identity)
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()  # a botocore session is not thread-safe; its clients are

    def _region(self, bucket: BucketRef) -> str:
        return bucket.region or self._session.get_config_variable("region") or DEFAULT_REGION

    def _client(self, bucket: BucketRef) -> Any:
        region = self._region(bucket)
        with self._lock:
            if region not in self._clients:
                self._clients[region] = self._session.create_client(
                    "s3", region_name=region, config=_CLIENT_CONFIG)
            return self._clients[region]

    def validate_name(self, name: str) -> list[str]:
        return s3_name_problems(name)

    def exists(self, bucket: BucketRef) -> bool:
        try:
            with s3_errors(bucket.name):
                self._client(bucket).head_bucket(Bucket=bucket.name)
        except NoSuchBucket:
            return False
        return True

    def create(self, bucket: BucketRef) -> bool:
        if problems := self.validate_name(bucket.name):
            raise BadName(describe("S3", bucket.name, problems), code="InvalidBucketName")
        region = self._region(bucket)
        request: dict[str, Any] = {"Bucket": bucket.name}
        if region != DEFAULT_REGION:
            request["CreateBucketConfiguration"] = {"LocationConstraint": region}
        elif self._visible(bucket):  # us-east-1 answers 200 to re-creating one's own bucket
            return False
        client = self._client(bucket)
        with s3_errors(bucket.name):
            try:
                client.create_bucket(**request)
            except ClientError as e:
                if client_error_code(e) == "BucketAlreadyOwnedByYou":
                    return False
                raise  # BucketAlreadyExists: NameTaken
        self._abort_stale_uploads(client, bucket)
        return True

    def _visible(self, bucket: BucketRef) -> bool:
        """Whether these credentials see the bucket; a 403 (someone else's, or ours
        without HeadBucket) leaves it to CreateBucket to say which."""
        try:
            return self.exists(bucket)
        except AccessDenied:
            return False

    def _abort_stale_uploads(self, client: Any, bucket: BucketRef) -> None:
        try:
            with s3_errors(bucket.name):
                client.put_bucket_lifecycle_configuration(
                    Bucket=bucket.name, LifecycleConfiguration=_ABORT_STALE_UPLOADS)
        except AccessDenied as e:  # a convenience: the bucket works without it
            log.warning("S3 bucket %s: no lifecycle rule to abort stale uploads: %s",
                        bucket.name, e)

    def upload_dir(self, source: Path, bucket: BucketRef,
                   progress: Callable[[UploadProgress], None] | None = None) -> UploadReport:
        existing = list(self.list(bucket))
        files = local_files(source, bucket.prefix)
        transfer = self._transfer(bucket)

        def put(file: LocalFile, md5: bytes) -> None:
            with s3_errors(bucket.name):
                transfer.upload_file(str(file.path), bucket.name, file.key,
                                     extra_args={"Metadata": {MD5_METADATA: b64(md5)}})

        return upload_files(files, existing, put, progress, self.workers)

    def list(self, bucket: BucketRef) -> Iterator[ObjectInfo]:
        client = self._client(bucket)
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket.name, Prefix=key_prefix(bucket.prefix))
        with s3_errors(bucket.name):
            for page in pages:
                for item in page.get("Contents", []):
                    etag = item["ETag"].strip('"')
                    md5 = (etag if _PLAIN_MD5.fullmatch(etag)
                           else self._metadata_md5(client, bucket.name, item["Key"]))
                    yield ObjectInfo(key=item["Key"], size=item["Size"], md5=md5)

    def _transfer(self, bucket: BucketRef) -> S3Transfer:
        return S3Transfer(self._client(bucket), TransferConfig(
            multipart_threshold=self.part_size, multipart_chunksize=self.part_size,
            max_concurrency=4))

    def put(self, bucket: BucketRef, key: str, data: bytes) -> None:
        with s3_errors(bucket.name):
            self._client(bucket).put_object(
                Bucket=bucket.name, Key=key, Body=data,
                Metadata={MD5_METADATA: b64(hashlib.md5(data, usedforsecurity=False).digest())})

    def download(self, bucket: BucketRef, key: str, target: Path) -> None:
        with s3_errors(bucket.name):
            self._transfer(bucket).download_file(bucket.name, key, str(target))

    @staticmethod
    def _metadata_md5(client: Any, name: str, key: str) -> str | None:
        metadata = client.head_object(Bucket=name, Key=key).get("Metadata", {})
        return hex_from_b64(metadata.get(MD5_METADATA))

    def delete(self, bucket: BucketRef) -> bool:
        if not self.exists(bucket):
            return False
        client = self._client(bucket)
        try:
            with s3_errors(bucket.name):
                self._abort_uploads(client, bucket.name)
                self._delete_objects(client, bucket.name)
                client.delete_bucket(Bucket=bucket.name)
        except NoSuchBucket:  # another delete got there first
            return False
        return True

    @staticmethod
    def _abort_uploads(client: Any, name: str) -> None:
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", []):
                client.abort_multipart_upload(Bucket=name, Key=upload["Key"],
                                              UploadId=upload["UploadId"])

    @staticmethod
    def _delete_objects(client: Any, name: str) -> None:
        """Every version and delete marker (a plain bucket's objects are version "null")."""
        for page in client.get_paginator("list_object_versions").paginate(Bucket=name):
            doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                      for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if doomed:  # a page holds at most 1000: DeleteObjects' limit too
                client.delete_objects(Bucket=name, Delete={"Objects": doomed, "Quiet": True})

    def rclone_remote(self, bucket: BucketRef) -> RcloneRemote:
        client = self._client(bucket)
        options = {"provider": "AWS", "region": self._region(bucket),
                   "env_auth": "true" if self._node_uses_role() else "false"}
        endpoint = client.meta.endpoint_url
        if not endpoint.endswith(".amazonaws.com"):
            options["endpoint"] = endpoint
        return RcloneRemote(type="s3", options=options,
                            path=f"{bucket.name}/{key_prefix(bucket.prefix)}".rstrip("/"))

    def _node_uses_role(self) -> bool:
        credentials = self._session.get_credentials()
        return credentials is None or credentials.method in _ROLE_METHODS

    def rclone_secrets(self, bucket: BucketRef) -> dict[str, str]:
        if self._node_uses_role():
            return {}
        frozen = self._session.get_credentials().get_frozen_credentials()
        secrets = {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key}
        if frozen.token:
            secrets["session_token"] = frozen.token
        return secrets
