"""Pure rules of a cluster's life: what a refresh concludes, and when autostop fires.

Used by ClusterWorkflow (so: no I/O, no clocks; times are passed in).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from orch.clouds.base import InstanceStatus
from orch.status import ClusterStatus

GONE_REASON = "all instances are gone: terminated outside orch, or preempted"


class Autostop(BaseModel):
    """Stop (or tear down, with ``down``) after ``idle_minutes`` without jobs."""

    idle_minutes: int = Field(ge=0)
    down: bool = False


class RefreshVerdict(BaseModel):
    status: ClusterStatus  # TERMINATED: forget the cluster
    reason: str = ""
    leaked: list[str] = Field(default_factory=list)


def refresh_verdict(
    status: ClusterStatus,
    expected: list[str],
    found: dict[str, InstanceStatus],
    ray_healthy: bool | None,
) -> RefreshVerdict:
    """Compare a record (its status and expected instance ids) with what the cloud shows.

    ``ray_healthy`` is None when it was not checked (the cluster is not UP). More
    instances than expected is a leak, named; it does not change the status.
    """
    leaked = sorted(set(found) - set(expected)) if expected else []
    ours = {i: s for i, s in found.items() if not expected or i in expected}
    if not ours:
        return RefreshVerdict(status=ClusterStatus.TERMINATED, reason=GONE_REASON, leaked=leaked)
    states = set(ours.values())
    missing = sorted(set(expected) - set(ours))
    if states == {InstanceStatus.STOPPED} and not missing:
        return RefreshVerdict(status=ClusterStatus.STOPPED, leaked=leaked,
                              reason="" if status == ClusterStatus.STOPPED
                              else "all instances are stopped")
    problems = []
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    not_running = sorted(f"{i} ({s})" for i, s in ours.items() if s != InstanceStatus.RUNNING)
    if not_running:
        problems.append(f"not running: {', '.join(not_running)}")
    if not problems and ray_healthy is False:
        problems.append("Ray is not healthy on every node")
    if problems:
        return RefreshVerdict(status=ClusterStatus.INIT, reason="; ".join(problems),
                              leaked=leaked)
    if status == ClusterStatus.STOPPED:
        return RefreshVerdict(status=ClusterStatus.INIT, leaked=leaked,
                              reason="instances were started outside orch (run orch start)")
    return RefreshVerdict(status=ClusterStatus.UP, leaked=leaked)


def autostop_deadline(setting: Autostop | None, last_activity: datetime | None
                      ) -> datetime | None:
    """When autostop fires if nothing happens before: idle minutes after the last job."""
    if setting is None or last_activity is None:
        return None
    return last_activity + timedelta(minutes=setting.idle_minutes)
