"""Facts about the Temporal server orch talks to, asked without starting anything."""

from __future__ import annotations

import asyncio

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import RPCError

from orch.client import connect_temporal
from orch.config import TemporalSettings
from orch.versions import Versions, embedded_server_version, local_versions

UNREACHABLE = "unreachable"
INFO_TIMEOUT_S = 5.0


async def external_server_version(settings: TemporalSettings,
                                  timeout_s: float = INFO_TIMEOUT_S) -> str:
    """The version an external server reports (GetSystemInfo); "unreachable" when it
    refuses the connection or does not answer within ``timeout_s`` — a version report
    must not hang or fail."""

    async def ask() -> str:
        client = await connect_temporal(settings, timeout_s=0)
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        return info.server_version or "unknown"

    try:
        return await asyncio.wait_for(ask(), timeout_s)
    except (TimeoutError, RPCError, RuntimeError, OSError):
        return UNREACHABLE


async def versions(settings: TemporalSettings) -> Versions:
    """orch, Temporal server, Ray and catalog versions. With an external server configured
    (``TEMPORAL_ADDRESS`` or the config file) it is asked; otherwise the embedded server's
    binary tells (nothing is started)."""
    if settings.address:
        server = await external_server_version(settings)
        return local_versions(server, settings.address)
    server = await asyncio.to_thread(embedded_server_version)
    return local_versions(server, "embedded")
