"""The launch semaphore's vocabulary: names, limits, requests and state (pure models).

Shared by the workflow (workflows/launch_semaphore.py), its activities, the workflows that
take permits (workflows/permits.py) and anyone reading the ``permits`` query.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, field_serializer, field_validator

LAUNCH_SEMAPHORE_WORKFLOW = "LaunchSemaphoreWorkflow"
LAUNCH_SEMAPHORE_ID = "launch-semaphore"
ACQUIRE_SIGNAL = "acquire"
RELEASE_SIGNAL = "release"
RELEASE_MANY_SIGNAL = "release_many"  # list[ReleaseRequest]: many permits back at once
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _request_row(request: AcquireRequest) -> list[str]:
    return [request.kind, request.holder_id, request.holder_first_run_id, request.request_id]


def _request_of(row: Any) -> Any:
    """A request from its row; anything else (the fields by name) as it is."""
    if isinstance(row, list) and len(row) == 4:
        return dict(zip(("kind", "holder_id", "holder_first_run_id", "request_id"), row,
                        strict=True))
    return row


class PermitPool(BaseModel):
    """One pool's holders and waiters.

    In JSON (the semaphore's continue-as-new input, which carries its whole state) each
    holder and waiter is a row, ``[kind, holder_id, holder_first_run_id, request_id]``
    with the grant time in microseconds since the epoch after it, not an object: with
    every field named, 2,000 managed jobs' slots made an input of 600 KB, and 10,000 slots
    with 2,000 launches waiting 2.4 MB, past the server's 2 MB limit on a payload; as rows,
    1.4 MB (``tests/unit/test_semaphore_state.py``). Objects are still read, as runs
    recorded before wrote them.
    """

    holders: list[PermitHolder] = []
    """In grant order."""
    waiters: list[AcquireRequest] = []
    """In arrival order: the head is granted first."""

    @field_serializer("holders", when_used="json")
    def _holder_rows(self, holders: list[PermitHolder]) -> list[list[str | int]]:
        return [[*_request_row(h.request), (h.granted_at - _EPOCH) // timedelta(microseconds=1)]
                for h in holders]

    @field_serializer("waiters", when_used="json")
    def _waiter_rows(self, waiters: list[AcquireRequest]) -> list[list[str]]:
        return [_request_row(w) for w in waiters]

    @field_validator("holders", mode="before")
    @classmethod
    def _holders_from_rows(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [{"request": _request_of(row[:4]),
                 "granted_at": _EPOCH + timedelta(microseconds=row[4])}
                if isinstance(row, list) and len(row) == 5 else row for row in value]

    @field_validator("waiters", mode="before")
    @classmethod
    def _waiters_from_rows(cls, value: Any) -> Any:
        return [_request_of(row) for row in value] if isinstance(value, list) else value


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
