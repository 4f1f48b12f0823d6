"""Failover block rules: which part of the search space a failed launch rules out.

Pure code (stdlib, pydantic and ``orch.clouds.errors`` only) so that Temporal workflows can
import it: a failed attempt arrives as an error *type name* (the ``ApplicationError.type``
that crossed the activity boundary) plus the error's ``BlockScope``, and becomes a
:class:`BlockEntry` in a :class:`Blocklist` that the optimizer honours on the next round.
:class:`Candidate` (what the optimizer proposes) lives here too, for the same reason: the
failover workflow holds candidates in its state.

Scope → what is blocked (after SkyPilot's ``FailoverCloudErrorHandlerV2``):

======  ==============================================================================
ZONE    that zone, for that instance type and pricing (spot or not); a candidate
        without zones (Azure, local) is blocked as a whole in its region. A candidate
        whose zones are all blocked drops out of the next plan.
REGION  the region, every instance type
CLOUD   the whole cloud
NONE    nothing at first: a transient fault or throttling, retry the same place (after
        a backoff when throttled); the :data:`RETRIES_PER_ZONE`-th such failure of
        one place in one round blocks it as ZONE does, so failover always ends
======  ==============================================================================

Cloud error codes → error type and scope: what the providers raise, in short. Each cloud's
table lives in its provider's error module, the source of truth for every code
(:mod:`orch.clouds.aws_errors`, :mod:`orch.clouds.gcp_errors`,
:mod:`orch.clouds.azure_errors`); the failover rules see only the typed error's name and
``scope``:

=====  ====================================================  ==================  ======
cloud  code                                                  error type          scope
=====  ====================================================  ==================  ======
aws    InsufficientInstanceCapacity, InsufficientCapacity,   CapacityError       zone if a zone
       InsufficientHostCapacity, Unsupported                                     was asked,
                                                                                 else region
aws    VcpuLimitExceeded, InstanceLimitExceeded,             QuotaError          region
       MaxSpotInstanceCountExceeded
aws    RequestLimitExceeded, Throttling, InternalError,      TransientError      none
       Unavailable, ServiceUnavailable
aws    AuthFailure, UnauthorizedOperation,                   AuthError           cloud
       InvalidClientTokenId, ExpiredToken; no
       credentials at all (NoCredentialsError)
aws    InvalidAMIID.*, InvalidParameterValue                 InvalidConfigError  cloud
gcp    QUOTA_EXCEEDED / quotaExceeded naming                 QuotaError          cloud
       GPUS_ALL_REGIONS (a global quota)
gcp    QUOTA_EXCEEDED / quotaExceeded (per-region metric)    QuotaError          region
gcp    ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS],          CapacityError       zone
       insufficientCapacity, RESOURCE_NOT_FOUND,
       RESOURCE_NOT_READY / resourceNotReady,
       UNSUPPORTED_OPERATION
gcp    IAM_PERMISSION_DENIED                                 AuthError           cloud
gcp    VPC_NOT_FOUND (VPCs are global)                       InvalidConfigError  cloud
gcp    rateLimitExceeded, RESOURCE_OPERATION_RATE_EXCEEDED   TransientError      none
azure  ZonalAllocationFailed                                 CapacityError       zone
azure  AllocationFailed, OverconstrainedAllocationRequest,   CapacityError       zone if a zone
       OverconstrainedZonalAllocationRequest,                                    was asked,
       SkuNotAvailable                                                           else region
azure  QuotaExceeded, OperationNotAllowed naming a quota     QuotaError          region
azure  ReadOnlyDisabledSubscription, AuthorizationFailed,    AuthError           cloud
       ClientAuthenticationError, SubscriptionNotFound,
       InvalidAuthenticationToken and its kin
azure  InvalidParameter, ImageNotFound,                      InvalidConfigError  cloud
       MissingSubscriptionRegistration and its kin
azure  TooManyRequests, InternalServerError,                 TransientError      none
       ServiceUnavailable (and any HTTP 429 or 5xx)
aws,   anything else (a gcp HTTP error goes by its status    ProvisionError      zone
gcp    first: 403 auth, 404 capacity, 429/5xx transient...)
azure  anything else                                         CapacityError       zone if a zone
                                                                                 was asked,
                                                                                 else region
=====  ====================================================  ==================  ======
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orch.clouds.errors import BlockScope


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Candidate(_Frozen):
    """One place to try: a cloud, region, its usable zones (cheapest first) and what to run.

    ``instance_type`` is None on the local cloud, which sizes nodes by ``cpus`` and
    ``memory_gb`` instead. Prices are US dollars per hour; ``price_per_hour`` covers all
    ``num_nodes`` nodes.
    """

    cloud: str
    region: str
    zones: list[str] = Field(default_factory=list)
    instance_type: str | None = None
    accelerators: dict[str, int] | None = None
    use_spot: bool = False
    num_nodes: int = 1
    cpus: float = 0.0
    memory_gb: float = 0.0
    price_per_node: float = 0.0
    price_per_hour: float = 0.0
    alternative: int = 0  # which of the task's resources.alternatives() it satisfies

    def accelerators_text(self) -> str:
        return ", ".join(f"{name}:{count}" for name, count in (self.accelerators or {}).items())


class BlockEntry(_Frozen):
    """A part of the search space ruled out. ``None`` fields match anything."""

    cloud: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    use_spot: bool | None = None
    reason: str = ""

    def covers(self, cloud: str, region: str | None, zone: str | None,
               instance_type: str | None, use_spot: bool | None) -> bool:
        """Whether a launch at (cloud, region, zone) of that instance type is ruled out; a
        zone-less query (a zone-less candidate) is not covered by a zone entry."""
        return (
            self.cloud == cloud
            and self.region in (None, region)
            and self.zone in (None, zone)
            and self.instance_type in (None, instance_type)
            and self.use_spot in (None, use_spot)
        )

    def describe(self) -> str:
        if self.zone is not None:
            where = f"zone {self.zone}"
        elif self.region is not None:
            where = f"region {self.region}"
        else:
            return f"cloud {self.cloud}"
        what = [self.instance_type or ""] + (["spot"] if self.use_spot else [])
        detail = " ".join(w for w in what if w)
        return f"{self.cloud} {where}" + (f" ({detail})" if detail else "")


class Blocklist(_Frozen):
    """The parts of the search space ruled out so far. Immutable: :meth:`add` returns a new
    list, so a workflow can keep it in its state and pass it to activities."""

    entries: list[BlockEntry] = Field(default_factory=list)

    def blocks(self, cloud: str, region: str | None = None, zone: str | None = None,
               instance_type: str | None = None, use_spot: bool | None = None) -> bool:
        return any(e.covers(cloud, region, zone, instance_type, use_spot) for e in self.entries)

    def add(self, entry: BlockEntry | None) -> Blocklist:
        if entry is None or entry in self.entries:
            return self
        return Blocklist(entries=[*self.entries, entry])


def block_entry(candidate: Candidate, error_type: str, scope: BlockScope,
                zone: str | None) -> BlockEntry | None:
    """What to block after ``candidate`` failed in ``zone`` (None: the attempt was not tied
    to one zone) with an error of class ``error_type`` and the given scope."""
    if scope == BlockScope.NONE:
        return None
    if scope == BlockScope.CLOUD:
        return BlockEntry(cloud=candidate.cloud, reason=error_type)
    if scope == BlockScope.REGION:
        return BlockEntry(cloud=candidate.cloud, region=candidate.region, reason=error_type)
    return BlockEntry(cloud=candidate.cloud, region=candidate.region, zone=zone,
                      instance_type=candidate.instance_type, use_spot=candidate.use_spot,
                      reason=error_type)


class FailoverAttempt(_Frozen):
    """One failed try of a candidate, for the failover history shown to the user."""

    candidate: Candidate
    zone: str | None = None
    error_type: str
    code: str = ""
    message: str = ""
    block: BlockEntry | None = None


def record_failure(candidate: Candidate, zone: str | None, error_type: str, code: str,
                   message: str, scope: BlockScope, retries: int = 0) -> FailoverAttempt:
    """The attempt record, with the block rule applied to it. ``retries``: how many earlier
    failures of this place in this round blocked nothing (:meth:`Retries.of`); the
    :data:`RETRIES_PER_ZONE`-th blocks the zone whatever its scope, else a transient fault
    that outlives its activity retries would be planned again forever."""
    block = block_entry(candidate, error_type, scope, zone)
    if block is None and retries + 1 >= RETRIES_PER_ZONE:
        block = block_entry(candidate, f"{error_type} x{retries + 1}", BlockScope.ZONE, zone)
    return FailoverAttempt(candidate=candidate, zone=zone, error_type=error_type, code=code,
                           message=message, block=block)


RETRIES_PER_ZONE = 3  # failures that block nothing, per place and round, before it is blocked
THROTTLE_BACKOFF_S = (30, 90)  # durable waits before retrying a place the cloud throttled

# Each cloud's "slow down" codes (see its errors module: they are TransientErrors there), and
# the HTTP status GCP and Azure fall back to when a 429 carries no code.
THROTTLING_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
    "rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED",
    "RESOURCE_OPERATION_RATE_EXCEEDED", "TooManyRequests", "429",
})


def is_throttling(code: str) -> bool:
    """Whether a cloud error code says "too many requests" (as opposed to a passing fault)."""
    return code in THROTTLING_CODES


def place_key(candidate: Candidate, zone: str | None) -> str:
    """What a retry count is kept for: one zone (or zone-less candidate), type and pricing."""
    return "/".join([candidate.cloud, candidate.region, zone or "-",
                     candidate.instance_type or "-", "spot" if candidate.use_spot else "on"])


class Retries(_Frozen):
    """Failures that blocked nothing so far this round, per :func:`place_key`. Immutable,
    like :class:`Blocklist`."""

    counts: dict[str, int] = Field(default_factory=dict)

    def of(self, candidate: Candidate, zone: str | None) -> int:
        return self.counts.get(place_key(candidate, zone), 0)

    def after(self, attempt: FailoverAttempt) -> Retries:
        """The counts once ``attempt`` is recorded: one more if it blocked nothing."""
        if attempt.block is not None:
            return self
        key = place_key(attempt.candidate, attempt.zone)
        return Retries(counts={**self.counts, key: self.counts.get(key, 0) + 1})


def retry_backoff_s(attempt: FailoverAttempt, retries: int) -> int:
    """Seconds to wait (on a durable timer, without a launch permit) before the place of
    ``attempt`` is tried again: 0 unless the cloud throttled us and the place stays open.
    ``retries``: the place's count before this attempt."""
    if attempt.block is not None or not is_throttling(attempt.code):
        return 0
    return THROTTLE_BACKOFF_S[min(retries, len(THROTTLE_BACKOFF_S) - 1)]


HISTORY_KEPT = 50  # attempts a failover keeps (the latest); older ones are only counted


class AttemptLog(_Frozen):
    """The failover history, bounded: the latest :data:`HISTORY_KEPT` attempts and how many
    came before them. It lives in workflow state and crosses continue-as-new, so a launch
    that waits days for capacity does not carry thousands of attempts."""

    recent: list[FailoverAttempt] = Field(default_factory=list)
    older: int = 0  # attempts dropped from ``recent``

    @property
    def total(self) -> int:
        return self.older + len(self.recent)

    def add(self, attempt: FailoverAttempt) -> AttemptLog:
        kept = [*self.recent, attempt]
        dropped = max(0, len(kept) - HISTORY_KEPT)
        return AttemptLog(recent=kept[dropped:], older=self.older + dropped)


HISTORY_HEADERS = ["#", "CLOUD", "REGION", "ZONE", "INSTANCE TYPE", "ACCELERATORS", "SPOT",
                   "ERROR", "CODE", "BLOCKED", "MESSAGE"]


def history_rows(attempts: list[FailoverAttempt], older: int = 0) -> list[list[str]]:
    """The failover history as table rows (columns: :data:`HISTORY_HEADERS`); ``older``
    attempts came before the first one given, so numbering starts after them."""
    return [
        [
            str(number),
            a.candidate.cloud,
            a.candidate.region,
            a.zone or "-",
            a.candidate.instance_type or "-",
            a.candidate.accelerators_text() or "-",
            "yes" if a.candidate.use_spot else "no",
            a.error_type,
            a.code or "-",
            a.block.describe() if a.block else "nothing (retried)",
            a.message,
        ]
        for number, a in enumerate(attempts, start=older + 1)
    ]

