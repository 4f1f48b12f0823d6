"""Staged files: what a task carries instead of its local workdir and file mounts once the
client has uploaded them (``orch.staging``), so that a worker on any host, and a managed
job's recovery long after, syncs the same files. A reference only: a store, a bucket, a
prefix and content hashes, never a credential or a file's contents."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orch.storage.base import BucketRef


class StagedTree(BaseModel):
    """One staged directory (or single file) in the staging store ``root``, named by the
    SHA-256 of its manifest (every file's path, size, mode and SHA-256)."""

    model_config = ConfigDict(frozen=True)

    root: BucketRef
    digest: str
    file_name: str | None = None  # a staged single file (a file mount): its name; else a dir

    @property
    def manifest_prefix(self) -> str:
        return _under(self.root.prefix, f"manifests/{self.digest}")

    @property
    def files_prefix(self) -> str:
        return _under(self.root.prefix, f"files/{self.digest}")


class StagedFiles(BaseModel):
    """A task's staged workdir and local file mounts (remote path -> tree)."""

    model_config = ConfigDict(frozen=True)

    workdir: StagedTree | None = None
    file_mounts: dict[str, StagedTree] = Field(default_factory=dict)


def _under(prefix: str, tail: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{tail}" if prefix else tail
