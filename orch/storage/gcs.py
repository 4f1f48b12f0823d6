"""The GCS store, through google-cloud-storage (the JSON API).

Credentials as the GCP provider finds them (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
application-default file, the metadata server only with ``cloud_identity``); the project
(for creating buckets) from ``GOOGLE_CLOUD_PROJECT`` or the credentials. With
``STORAGE_EMULATOR_HOST`` set (an emulator, as google-cloud-storage itself honours it)
calls are anonymous when no credentials are found. A bucket is made in ``bucket.region``
(a location such as ``us-central1``), else GCS's default (the US multi-region).

Hashes: GCS keeps every non-composite object's ``md5Hash``; uploads ask the library to
verify it (``checksum="md5"``). Files over ``part_size`` go as resumable uploads in
``part_size`` chunks, the rest as one multipart request.

Nodes: rclone's ``google cloud storage`` backend; its ``env_auth`` where the worker uses
the metadata server (the node's service account), else the worker's service-account key
or gcloud user credentials (refresh token) out of band, as SkyPilot copies gcloud's
config to its nodes.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from google.api_core.exceptions import Conflict, Forbidden, GoogleAPICallError
from google.auth import compute_engine
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from orch.clouds import gcp_credentials
from orch.settings import load_settings
from orch.storage.base import (
    BucketRef,
    ObjectInfo,
    RcloneRemote,
    StoreKind,
    UploadProgress,
    UploadReport,
)
from orch.storage.errors import BadName, NameTaken, NoSuchBucket, StorageError
from orch.storage.gcs_errors import code_of, gcs_errors
from orch.storage.names import describe, gcs_name_problems
from orch.storage.upload import (
    DEFAULT_WORKERS,
    LocalFile,
    hex_from_b64,
    key_prefix,
    local_files,
    upload_files,
)

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_CHUNK_UNIT = 256 * 1024  # resumable chunks are multiples of this


class GCSStore:
    """GCS buckets; see the module docstring."""

    kind = StoreKind.GCS

    def __init__(self, *, part_size: int = 8 * 1024 * 1024, workers: int = DEFAULT_WORKERS):
        self.part_size = part_size
        self.workers = workers
        self._lock = threading.Lock()
        self._local = threading.local()  # clients hold a requests session: one per thread
        self._found: gcp_credentials.Found | None = None

    @property
    def emulator(self) -> str | None:
        return os.environ.get(EMULATOR_ENV) or None

    def _credentials(self, bucket: str) -> gcp_credentials.Found:
        with self._lock, gcs_errors(bucket):
            if self._found is None:
                self._found = gcp_credentials.load(
                    os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or None,
                    cloud_identity=load_settings().cloud_identity,
                    anonymous=bool(self.emulator))
            return self._found

    def _project(self, bucket: str) -> str | None:
        return os.environ.get("GOOGLE_CLOUD_PROJECT") or self._credentials(bucket).project

    def _client(self, bucket: str) -> storage.Client:
        client: storage.Client | None = getattr(self._local, "client", None)
        if client is None:
            # A project only matters for creating buckets; without one the library would
            # ask the metadata server for it, so a placeholder stands in (create checks).
            client = storage.Client(project=self._project(bucket) or "no-project",
                                    credentials=self._credentials(bucket).credentials)
            self._local.client = client
        return client

    def _bucket(self, bucket: BucketRef) -> storage.Bucket:
        return self._client(bucket.name).bucket(bucket.name)

    def validate_name(self, name: str) -> list[str]:
        return gcs_name_problems(name)

    def exists(self, bucket: BucketRef) -> bool:
        try:
            with gcs_errors(bucket.name):
                self._bucket(bucket).reload()
        except NoSuchBucket:
            return False
        return True

    def create(self, bucket: BucketRef) -> bool:
        if problems := self.validate_name(bucket.name):
            raise BadName(describe("GCS", bucket.name, problems), code="invalid")
        if not self._project(bucket.name):
            raise StorageError(f"GCS bucket {bucket.name} cannot be made without a project: "
                               "set GOOGLE_CLOUD_PROJECT", code="NoProject", retryable=False)
        client = self._client(bucket.name)
        with gcs_errors(bucket.name):
            try:
                client.create_bucket(bucket.name, location=bucket.region)
            except Conflict as e:  # 409: ours from before, or someone else's
                return self._already_ours(bucket, e)
            except GoogleAPICallError as e:
                if e.code == 400:
                    raise BadName(f"GCS refused the bucket name {bucket.name!r} "
                                  f"({code_of(e)}): {e.message}", code=code_of(e)) from e
                raise
        return True

    def _already_ours(self, bucket: BucketRef, conflict: Conflict) -> bool:
        """GCS answers 409 both to a second create of one's own bucket and to a name held
        by another project; whether we may read it tells them apart."""
        try:
            self._bucket(bucket).reload()
        except Forbidden as e:
            raise NameTaken(f"GCS bucket {bucket.name} belongs to another project "
                            f"({code_of(conflict)}): {conflict.message}; bucket names are "
                            "global, choose another name", code=code_of(conflict)) from e
        return False

    def upload_dir(self, source: Path, bucket: BucketRef,
                   progress: Callable[[UploadProgress], None] | None = None) -> UploadReport:
        existing = list(self.list(bucket))
        files = local_files(source, bucket.prefix)
        chunk = max(_CHUNK_UNIT, self.part_size // _CHUNK_UNIT * _CHUNK_UNIT)

        def put(file: LocalFile, _md5: bytes) -> None:
            blob = self._bucket(bucket).blob(file.key)
            with gcs_errors(bucket.name), file.path.open("rb") as data:
                if file.size > self.part_size:  # size unknown to the library: resumable
                    blob.chunk_size = chunk
                    blob.upload_from_file(data, checksum="md5")
                else:
                    blob.upload_from_file(data, size=file.size, checksum="md5")

        return upload_files(files, existing, put, progress, self.workers)

    def list(self, bucket: BucketRef) -> Iterator[ObjectInfo]:
        blobs = self._client(bucket.name).list_blobs(bucket.name, prefix=key_prefix(bucket.prefix))
        with gcs_errors(bucket.name):
            for blob in blobs:
                yield ObjectInfo(key=blob.name, size=blob.size or 0,
                                 md5=hex_from_b64(blob.md5_hash))

    def put(self, bucket: BucketRef, key: str, data: bytes) -> None:
        with gcs_errors(bucket.name):
            self._bucket(bucket).blob(key).upload_from_string(data, checksum="md5")

    def download(self, bucket: BucketRef, key: str, target: Path) -> None:
        with gcs_errors(bucket.name):
            self._bucket(bucket).blob(key).download_to_filename(str(target), checksum="md5")

    def delete(self, bucket: BucketRef) -> bool:
        """Objects first (``Bucket.delete(force=True)`` stops at 256), in parallel."""
        try:
            keys = [o.key for o in self.list(bucket.model_copy(update={"prefix": ""}))]
        except NoSuchBucket:
            return False

        def remove(key: str) -> None:
            try:
                with gcs_errors(bucket.name):
                    self._bucket(bucket).blob(key).delete()
            except NoSuchBucket:  # the object (404 alike) went meanwhile
                pass

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(remove, keys))
        try:
            with gcs_errors(bucket.name):
                self._bucket(bucket).delete()
        except NoSuchBucket:
            return False
        return True

    def rclone_remote(self, bucket: BucketRef) -> RcloneRemote:
        credentials = self._credentials(bucket.name).credentials
        options = {"bucket_policy_only": "true",
                   "env_auth": "true" if isinstance(credentials,
                                                    compute_engine.Credentials) else "false"}
        if isinstance(credentials, AnonymousCredentials):
            options["anonymous"] = "true"
        if self.emulator:
            options["endpoint"] = self.emulator
        return RcloneRemote(type="google cloud storage", options=options,
                            path=f"{bucket.name}/{key_prefix(bucket.prefix)}".rstrip("/"))

    def rclone_secrets(self, bucket: BucketRef) -> dict[str, str]:
        found = self._credentials(bucket.name)
        credentials: Any = found.credentials
        if isinstance(credentials, service_account.Credentials):
            path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or gcp_credentials.adc_path()
            return {"service_account_credentials": Path(path).read_text()}
        if isinstance(credentials, user_credentials.Credentials):
            token = {"access_token": "", "token_type": "Bearer",
                     "refresh_token": credentials.refresh_token,
                     "expiry": "2000-01-01T00:00:00Z"}  # expired: rclone refreshes first
            return {"client_id": credentials.client_id or "",
                    "client_secret": credentials.client_secret or "",
                    "token": json.dumps(token)}
        return {}  # the metadata server (env_auth), or anonymous for an emulator
