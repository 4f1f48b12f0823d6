"""The Azure Blob store, through azure-storage-blob: a bucket is a container of a storage
account (``https://<account>.blob.core.windows.net/<container>``).

The account and its key come from ``AZURE_STORAGE_CONNECTION_STRING`` (whose
``BlobEndpoint`` may point elsewhere: Azurite in tests) or ``AZURE_STORAGE_ACCOUNT`` and
``AZURE_STORAGE_KEY``, the variables Azure's own CLI and SDKs read; with no key, Azure AD
through the same credential chain as the Azure provider (needs a data role such as
Storage Blob Data Contributor). A bucket without an account uses that default account.
orch makes containers, not storage accounts: the account must exist (its region is the
containers' region; ``bucket.region`` is not used).

Hashes: every blob orch writes carries its ``Content-MD5`` (set by the client: Azure
computes none for blobs sent in blocks). Files over ``part_size`` go in blocks of that
size, the rest in one request.

Nodes: rclone's ``azureblob`` backend; the account key out of band, as SkyPilot hands its
nodes the storage account key; ``env_auth`` (the node's managed identity) without one.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient, ContentSettings

from orch.clouds.azure_identity import identity_chain
from orch.settings import load_settings
from orch.storage.azure_errors import azure_errors, error_code
from orch.storage.base import (
    BucketRef,
    ObjectInfo,
    RcloneRemote,
    StoreKind,
    UploadProgress,
    UploadReport,
)
from orch.storage.errors import AccessDenied, BadName
from orch.storage.names import azure_account_problems, azure_container_problems, describe
from orch.storage.upload import (
    DEFAULT_WORKERS,
    LocalFile,
    key_prefix,
    local_files,
    upload_files,
)

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"


def parse_connection_string(text: str) -> dict[str, str]:
    """``Key=value;...`` (values may hold '=': keys are base64)."""
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def default_url(account: str) -> str:
    return f"https://{account}.blob.core.windows.net"


class AzureBlobStore:
    """Azure Blob containers; see the module docstring."""

    kind = StoreKind.AZURE

    def __init__(self, *, part_size: int = 8 * 1024 * 1024, workers: int = DEFAULT_WORKERS):
        self.part_size = part_size
        self.workers = workers
        self._lock = threading.Lock()
        self._services: dict[str, BlobServiceClient] = {}
        self._chain: Any = None

    def _settings(self) -> dict[str, str]:
        """AccountName, AccountKey and BlobEndpoint as far as the environment gives them."""
        env = os.environ
        found = parse_connection_string(env.get(CONNECTION_STRING_ENV, ""))
        if "AccountName" not in found and env.get("AZURE_STORAGE_ACCOUNT"):
            found["AccountName"] = env["AZURE_STORAGE_ACCOUNT"]
            if env.get("AZURE_STORAGE_KEY"):
                found["AccountKey"] = env["AZURE_STORAGE_KEY"]
        return found

    @property
    def default_account(self) -> str | None:
        return self._settings().get("AccountName")

    def _account(self, bucket: BucketRef) -> str:
        account = bucket.account or self.default_account
        if not account:
            raise AccessDenied(f"Azure container {bucket.name} names no storage account and "
                               f"none is set ({CONNECTION_STRING_ENV} or "
                               "AZURE_STORAGE_ACCOUNT)", code="NoAccount")
        return account

    def _endpoint_and_key(self, account: str) -> tuple[str, str | None]:
        settings = self._settings()
        if settings.get("AccountName") != account:
            return default_url(account), None
        endpoint = settings.get("BlobEndpoint") or default_url(account)
        return endpoint.rstrip("/"), settings.get("AccountKey")

    def _container(self, bucket: BucketRef) -> ContainerClient:
        account = self._account(bucket)
        with self._lock:
            if account not in self._services:
                endpoint, key = self._endpoint_and_key(account)
                if key is None and self._chain is None:
                    self._chain = identity_chain(load_settings().cloud_identity)
                credential: Any = ({"account_name": account, "account_key": key} if key
                                   else self._chain)
                self._services[account] = BlobServiceClient(
                    endpoint, credential=credential, max_single_put_size=self.part_size,
                    max_block_size=self.part_size)
            return self._services[account].get_container_client(bucket.name)

    def validate_name(self, name: str) -> list[str]:
        return azure_container_problems(name)

    def exists(self, bucket: BucketRef) -> bool:
        with azure_errors(bucket.name):
            return bool(self._container(bucket).exists())

    def create(self, bucket: BucketRef) -> bool:
        account = self._account(bucket)
        if problems := self.validate_name(bucket.name):
            raise BadName(describe("Azure", bucket.name, problems), code="InvalidResourceName")
        if problems := azure_account_problems(account):
            raise BadName(f"Azure storage account name {account!r}: " + "; ".join(problems),
                          code="AccountNameInvalid")
        with azure_errors(bucket.name):
            try:
                self._container(bucket).create_container()
            except ResourceExistsError as e:
                if error_code(e) == "ContainerAlreadyExists":  # the account's own
                    return False
                raise
        return True

    def upload_dir(self, source: Path, bucket: BucketRef,
                   progress: Callable[[UploadProgress], None] | None = None) -> UploadReport:
        existing = list(self.list(bucket))
        files = local_files(source, bucket.prefix)
        container = self._container(bucket)

        def put(file: LocalFile, md5: bytes) -> None:
            with azure_errors(bucket.name), file.path.open("rb") as data:
                container.upload_blob(
                    file.key, data, length=file.size, overwrite=True, max_concurrency=4,
                    content_settings=ContentSettings(content_md5=bytearray(md5)))

        return upload_files(files, existing, put, progress, self.workers)

    def list(self, bucket: BucketRef) -> Iterator[ObjectInfo]:
        blobs = self._container(bucket).list_blobs(name_starts_with=key_prefix(bucket.prefix))
        with azure_errors(bucket.name):
            for blob in blobs:
                md5 = blob.content_settings.content_md5
                yield ObjectInfo(key=blob.name, size=blob.size,
                                 md5=bytes(md5).hex() if md5 else None)

    def put(self, bucket: BucketRef, key: str, data: bytes) -> None:
        md5 = hashlib.md5(data, usedforsecurity=False).digest()
        with azure_errors(bucket.name):
            self._container(bucket).upload_blob(
                key, data, overwrite=True,
                content_settings=ContentSettings(content_md5=bytearray(md5)))

    def download(self, bucket: BucketRef, key: str, target: Path) -> None:
        with azure_errors(bucket.name), target.open("wb") as out:
            self._container(bucket).download_blob(key, max_concurrency=4).readinto(out)

    def delete(self, bucket: BucketRef) -> bool:
        """Azure removes the blobs with the container (the name is then unusable for a
        while: creating it again answers ContainerBeingDeleted, which is retried)."""
        with azure_errors(bucket.name):
            try:
                self._container(bucket).delete_container()
            except ResourceNotFoundError:
                return False
        return True

    def rclone_remote(self, bucket: BucketRef) -> RcloneRemote:
        account = self._account(bucket)
        endpoint, key = self._endpoint_and_key(account)
        options = {"account": account, "env_auth": "false" if key else "true"}
        if endpoint != default_url(account):
            options["endpoint"] = endpoint
        return RcloneRemote(type="azureblob", options=options,
                            path=f"{bucket.name}/{key_prefix(bucket.prefix)}".rstrip("/"))

    def rclone_secrets(self, bucket: BucketRef) -> dict[str, str]:
        _, key = self._endpoint_and_key(self._account(bucket))
        return {"key": key} if key else {}
