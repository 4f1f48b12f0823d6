"""The launch semaphore's vocabulary: names, limits, requests and state (pure models).

Shared by the workflow (workflows/launch_semaphore.py), its activities, the workflows that
take permits (workflows/permits.py) and anyone reading the ``permits`` query.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

LAUNCH_SEMAPHORE_WORKFLOW = "LaunchSemaphoreWorkflow"
LAUNCH_SEMAPHORE_ID = "launch-semaphore"
ACQUIRE_SIGNAL = "acquire"
RELEASE_SIGNAL = "release"
GRANT_SIGNAL = "orch_permit_granted"
PERMITS_QUERY = "permits"
# The launch pool's counts, as Int search attributes (when the settings publish them).
SA_LAUNCH_HOLDERS = "OrchLaunchHolders"
SA_LAUNCH_WAITING = "OrchLaunchWaiting"
REQUEST_PERMIT_ACTIVITY = "request_permit"
FIND_CLOSED_HOLDERS_ACTIVITY = "find_closed_permit_holders"

# How many released request ids are kept as dedup keys. A duplicate acquire can only come
# from a retry of the holder's request activity, which finishes long before this many
# other requests do.
FINISHED_REQUESTS_KEPT = 1024

PermitKind = Literal["launch", "job"]
PERMIT_KINDS: tuple[PermitKind, ...] = ("launch", "job")


class PermitLimits(BaseModel):
    launch: int = Field(default=16, ge=1)
    job: int = Field(default=2000, ge=1)

    def of(self, kind: PermitKind) -> int:
        return self.launch if kind == "launch" else self.job


class SemaphoreSettings(BaseModel):
    limits: PermitLimits = PermitLimits()
    publish_search_attributes: bool = False
    reclaim_interval: timedelta = timedelta(minutes=1)
    max_events_per_run: int = Field(default=4000, ge=50)


class AcquireRequest(BaseModel):
    kind: PermitKind
    holder_id: str
    """Workflow id of the holder: the grant is signalled there."""
    holder_first_run_id: str
    """First run id of the holder's run chain: tells it apart from a later workflow that
    reuses the same id after the holder closed."""
    request_id: str


class ReleaseRequest(BaseModel):
    kind: PermitKind
    request_id: str


class PermitGrant(BaseModel):
    kind: PermitKind
    request_id: str


class PermitRequest(BaseModel):
    """Input of the request_permit activity: which semaphore, and the acquire to send."""

    semaphore_id: str
    request: AcquireRequest


class PermitHolder(BaseModel):
    request: AcquireRequest
    granted_at: datetime


class PermitPool(BaseModel):
    holders: list[PermitHolder] = []
    """In grant order."""
    waiters: list[AcquireRequest] = []
    """In arrival order: the head is granted first."""


class SemaphoreState(BaseModel):
    launch: PermitPool = PermitPool()
    job: PermitPool = PermitPool()
    finished_request_ids: list[str] = []
    """Dedup keys of released requests, oldest first, at most FINISHED_REQUESTS_KEPT."""
    next_reclaim_at: datetime | None = None
    undelivered: list[str] = []
    """Request ids granted whose grant signal was not sent yet, in sending order: a run
    that continues as new hands them to the next one to send."""

    def pool(self, kind: PermitKind) -> PermitPool:
        return self.launch if kind == "launch" else self.job

    def all_holders(self) -> list[PermitHolder]:
        return [*self.launch.holders, *self.job.holders]


class LaunchSemaphoreInput(BaseModel):
    settings: SemaphoreSettings = SemaphoreSettings()
    state: SemaphoreState = SemaphoreState()


class PoolView(BaseModel):
    kind: PermitKind
    limit: int
    held: int
    waiting: int
    holders: list[PermitHolder]
    waiters: list[AcquireRequest]


class SemaphoreView(BaseModel):
    pools: list[PoolView]
