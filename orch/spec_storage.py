"""SkyPilot's bucket ``file_mounts``: the task's storage mounts, as its YAML writes them.

A ``file_mounts`` value is a local path (``orch.spec`` keeps those in ``file_mounts``), a
bucket URI, or a mapping with ``name``, ``source``, ``store``, ``mode`` and ``persistent``
(kept here, in ``Task.storage_mounts``, as SkyPilot's ``Task`` keeps its storage mounts):

* ``/data: s3://corpus/train`` — copy the bucket (or a prefix of it) into ``/data``
  (SkyPilot copies a URI given this way; orch never creates nor deletes such a bucket);
* ``{source: gs://corpus, mode: MOUNT}`` — the same bucket, mounted; still never deleted;
* ``{name: my-ckpt}`` — a bucket orch creates (or reuses, if it made it before), mounted;
* ``{name: my-data, source: ~/dataset}`` — created, then ``~/dataset`` uploaded into it
  (a list of local paths uploads each under its own base name).

SkyPilot's defaults: ``mode: MOUNT``, ``persistent: true``; a mapping without ``store``
lives on the store of the cloud the cluster lands on (``s3`` on aws, ``gcs`` on gcp,
``azure`` on azure, ``local`` on the local cloud), so its name must suit every store the
task may land on: it is checked against each of them before anything starts. URIs:
``s3://``, ``gs://``, ``https://<account>.blob.core.windows.net/<container>`` and
``local://`` (the local store, buckets under ``$ORCH_HOME/storage``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import StrictBool, field_validator, model_validator

from orch.local_paths import MISSING, path_kind, resolved
from orch.spec_envs import substitute
from orch.spec_errors import shorten
from orch.spec_resources import Resources, StrictModel
from orch.storage import names
from orch.storage.base import BucketRef, StoreKind
from orch.suggest import suggest


class StorageMode(StrEnum):
    """How a bucket reaches the nodes (SkyPilot's ``StorageMode``)."""

    MOUNT = "MOUNT"  # rclone mount, writes go straight to the bucket
    COPY = "COPY"  # downloaded at launch; writes stay on the node
    MOUNT_CACHED = "MOUNT_CACHED"  # rclone mount with a local VFS cache, written back


# Stores SkyPilot has and orch does not: the URI scheme or ``store:`` value → its name.
_OTHER_STORES = {"r2": "Cloudflare R2", "ibm": "IBM COS", "cos": "IBM COS",
                 "oci": "OCI Object Storage", "nebius": "Nebius Object Storage",
                 "cw": "CoreWeave Object Storage", "coreweave": "CoreWeave Object Storage"}
_SCHEMES = {"s3": StoreKind.S3, "gs": StoreKind.GCS, "local": StoreKind.LOCAL}
_AZURE_URL = re.compile(r"^https://([a-z0-9]{3,24})\.blob\.core\.windows\.net/([^/]+)(/.*)?$")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
# The store a cloud's clusters use for a mapping that names none.
CLOUD_STORES = {"aws": StoreKind.S3, "gcp": StoreKind.GCS, "azure": StoreKind.AZURE,
                "local": StoreKind.LOCAL}
KNOWN_URIS = ("s3://, gs://, https://<account>.blob.core.windows.net/<container> or "
              "local://")


def is_bucket_uri(source: str) -> bool:
    """``s3://b``, ``gs://b/p``, ``r2://``, ``https://…``: a storage source, not a path."""
    return _URI.match(source) is not None


def _not_ours(store: str) -> str:
    return (f"SkyPilot store {store} ({_OTHER_STORES[store]}) is not supported by orch: "
            "its stores are s3, gcs, azure and local")


def parse_bucket_uri(uri: str) -> BucketRef:
    """The bucket (and prefix) a URI names; ValueError says what is wrong with it."""
    azure = _AZURE_URL.match(uri)
    if azure:
        account, container, tail = azure.groups()
        return BucketRef(store=StoreKind.AZURE, name=container, account=account,
                         prefix=(tail or "").strip("/"))
    match = _URI.match(uri)
    scheme = match.group(1).lower() if match else ""
    if scheme in _OTHER_STORES:
        raise ValueError(_not_ours(scheme))
    if scheme not in _SCHEMES or match is None:
        raise ValueError(f"{shorten(uri)} is not a bucket URI: expected {KNOWN_URIS}")
    bucket, _, prefix = match.group(2).partition("/")
    if not bucket:
        raise ValueError(f"{shorten(uri)} names no bucket")
    return BucketRef(store=_SCHEMES[scheme], name=bucket, prefix=prefix.strip("/"))


class StorageMount(StrictModel):
    """One bucket entry of ``file_mounts`` (SkyPilot's storage YAML)."""

    name: str | None = None
    source: str | list[str] | None = None
    store: StoreKind | None = None
    mode: StorageMode = StorageMode.MOUNT
    persistent: StrictBool = True

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        lowered = value.lower()
        if lowered in _OTHER_STORES:
            raise ValueError(_not_ours(lowered))
        if lowered not in set(StoreKind):
            raise ValueError(f"expected s3, gcs, azure or local (got {shorten(value)!r})"
                             + suggest(lowered, [k.value for k in StoreKind]))
        return lowered

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if value.upper() not in set(StorageMode):
            raise ValueError(f"expected MOUNT, COPY or MOUNT_CACHED (got {shorten(value)!r})"
                             + suggest(value.upper(), [m.value for m in StorageMode]))
        return value.upper()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty name")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list: give at least one local path")
            uris = [item for item in value if is_bucket_uri(item)]
            if uris:
                raise ValueError(f"a list of sources holds local paths only, not "
                                 f"{shorten(uris[0])!r}")
        elif isinstance(value, str) and is_bucket_uri(value):
            parse_bucket_uri(value)  # a scheme orch has, naming a bucket
        return value

    @model_validator(mode="after")
    def _a_known_kind(self) -> StorageMount:
        """SkyPilot's combinations of name and source."""
        bucket = self.bucket_uri
        if self.name is None and self.source is None:
            raise ValueError("give a name (a bucket orch creates) or a source (local path "
                             f"or {KNOWN_URIS} URI)")
        if bucket is not None and self.name is not None:
            raise ValueError(f"name is not given with a bucket URI source ({bucket.uri} is "
                             "the bucket): leave name out")
        if bucket is not None and self.store is not None and self.store != bucket.store:
            raise ValueError(f"store {self.store} disagrees with the source {bucket.uri}")
        if self.name is None and bucket is None:
            raise ValueError("a local source is uploaded to a bucket orch creates: give the "
                             "bucket a name")
        if self.mode == StorageMode.COPY and self.source is None:
            raise ValueError("mode COPY copies a source: give a source (SkyPilot's rule)")
        return self

    @property
    def bucket_uri(self) -> BucketRef | None:
        """The bucket a URI source names (one orch never creates nor deletes), or None."""
        if isinstance(self.source, str) and is_bucket_uri(self.source):
            return parse_bucket_uri(self.source)
        return None

    @property
    def local_sources(self) -> list[str]:
        """The local paths to upload into the bucket (empty for a URI source)."""
        if self.source is None or self.bucket_uri is not None:
            return []
        return [self.source] if isinstance(self.source, str) else list(self.source)


def split_file_mounts(data: Any) -> Any:
    """A task's fields as written, with the bucket entries of ``file_mounts`` (mappings and
    URIs) moved to ``storage_mounts``; a URI given alone is SkyPilot's COPY."""
    if not isinstance(data, dict) or not isinstance(data.get("file_mounts"), dict):
        return data
    mounts: dict[Any, Any] = dict(data["file_mounts"])
    buckets = dict(data.get("storage_mounts") or {})
    for path, value in list(mounts.items()):
        if isinstance(value, dict):
            buckets[path] = mounts.pop(path)
        elif isinstance(value, str) and is_bucket_uri(value):
            buckets[path] = {"source": mounts.pop(path), "mode": StorageMode.COPY.value}
    if not buckets:
        return data
    return {**data, "file_mounts": mounts, "storage_mounts": buckets}


def substituted(mounts: Mapping[str, StorageMount], envs: Mapping[str, str]
                ) -> dict[str, StorageMount]:
    """``${NAME}`` of the task's envs filled into paths, names and sources."""
    def fill(value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            return [substitute(item, envs) for item in value]
        return substitute(value, envs) if value is not None else None

    return {substitute(path, envs): mount.model_copy(update={
        "name": fill(mount.name), "source": fill(mount.source)})
        for path, mount in mounts.items()}


def checked_paths(mounts: Mapping[str, StorageMount], base: Path,
                  ) -> tuple[dict[str, StorageMount], list[tuple[str, str]]]:
    """Local sources made absolute (against ``base``), and the problems with mount paths
    and sources, as (field path, message)."""
    problems: list[tuple[str, str]] = []
    result = {}
    for path, mount in mounts.items():
        field = f"file_mounts.{path}"
        if not (path.startswith("/") or path == "~" or path.startswith("~/")):
            problems.append((field, "a mount path is absolute or starts with ~/"))
        sources = []
        for source in mount.local_sources:
            full = Path(os.path.expanduser(source))
            full = full if full.is_absolute() else base / full
            kind = path_kind(full)
            if kind == MISSING or kind.startswith("not a"):
                problems.append((f"{field}.source", f"{shorten(str(full), 120)} "
                                 + ("does not exist" if kind == MISSING else f"is {kind}")))
            sources.append(resolved(full))
        if sources:
            mount = mount.model_copy(update={
                "source": sources[0] if isinstance(mount.source, str) else sources})
        result[path] = mount
    return result, problems


def possible_stores(resources: Resources, clouds: Iterable[str]) -> list[StoreKind]:
    """The stores a bucket that names none may land on: those of the clouds the task's
    resources name (every alternative), or of every cloud in ``clouds`` when one of them
    leaves the cloud open."""
    named = [choice.cloud for choice in resources.alternatives()]
    candidates = list(clouds) if None in named else [c for c in named if c]
    return list(dict.fromkeys(CLOUD_STORES[c] for c in candidates if c in CLOUD_STORES))


# Each store's naming rules: the pure functions its validate_name calls. (get_store would
# import each service's SDK and open a session: seconds, for a check of a string.)
NAME_RULES: dict[StoreKind, Callable[[str], list[str]]] = {
    StoreKind.S3: names.s3_name_problems, StoreKind.GCS: names.gcs_name_problems,
    StoreKind.AZURE: names.azure_container_problems, StoreKind.LOCAL: names.local_name_problems}


def name_problems(mounts: Mapping[str, StorageMount], resources: Resources,
                  clouds: Iterable[str]) -> list[tuple[str, str]]:
    """What each store's naming rules say about the buckets' names (its own store's for
    a store given or a URI's bucket; every possible one's otherwise)."""
    problems = []
    open_stores = possible_stores(resources, clouds)
    for path, mount in mounts.items():
        uri = mount.bucket_uri
        field = f"file_mounts.{path}." + ("source" if uri else "name")
        name = uri.name if uri else mount.name
        assert name is not None
        stores = [uri.store] if uri else [mount.store] if mount.store else open_stores
        for store in stores:
            found = NAME_RULES[store](name)
            if found:
                cloud = next(c for c, kind in CLOUD_STORES.items() if kind == store)
                where = "" if uri or mount.store else (
                    f" (a bucket that names no store lives on its cluster's cloud, and this "
                    f"task may run on {cloud}: give store or resources.cloud to choose)")
                problems.append((field, f"{shorten(name)!r} is not a valid {store} bucket "
                                        f"name{where}: {'; '.join(found)}"))
    return problems
