"""Buckets: one small store interface per storage service (``base.py``), the errors they
map their services' codes to (``errors.py``), and one module per store. Plain Python, no
Temporal: activities call these, as they call ``orch/clouds``."""

from __future__ import annotations

import importlib

from orch.storage.base import Store, StoreKind

_STORES = {
    StoreKind.LOCAL: "orch.storage.local:LocalStore",
    StoreKind.S3: "orch.storage.s3:S3Store",
    StoreKind.GCS: "orch.storage.gcs:GCSStore",
    StoreKind.AZURE: "orch.storage.azure_blob:AzureBlobStore",
}


def get_store(kind: StoreKind | str) -> Store:
    """The store for ``kind`` (a StoreKind or its value, any case). Imported lazily: a user
    of the local store never pays for boto3 or the Azure SDK."""
    try:
        module_name, _, attr = _STORES[StoreKind(str(kind).lower())].partition(":")
    except (KeyError, ValueError):
        known = ", ".join(k.value for k in StoreKind)
        raise ValueError(f"unknown store {kind!r}; known: {known}") from None
    store: Store = getattr(importlib.import_module(module_name), attr)()
    return store
