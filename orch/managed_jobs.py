"""Managed jobs: their statuses, their records and the rules of recovery (pure code).

A managed job (``orch jobs launch``) is a task, or a pipeline of tasks run one after
another, that must finish despite preemptions. ``workflows/managed_job.py`` drives it; this
module holds what that workflow, the client and the CLI share, with no Temporal in it:

* the statuses and schedule states, named as SkyPilot names them;
* the workflow's input and its state (:class:`ManagedJobState`, carried whole across
  continue-as-new), the per-task record (:class:`TaskRun`) and the controller's event list;
* the recovery rules: which launch phases follow a preemption under each strategy
  (:func:`recovery_plan`), how long to back off between launch rounds
  (:func:`backoff_seconds`), and what a failed launch means (:func:`classify_launch_failure`);
* :class:`JobSummary`, the row `orch jobs queue` lists (kept in the workflow's memo);
* where the worker keeps each attempt's output (:func:`attempt_log_path`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orch.bulk_teardown import BULK_TEARDOWN_ID, HandedOver
from orch.clouds.base import ClusterInfo
from orch.contracts.storage import BucketMount
from orch.failover_rules import BlockEntry, Blocklist
from orch.names import name_on_cloud
from orch.records import Placement, UsageClock
from orch.spec import JobRecovery, RecoveryStrategy, Resources, Task
from orch.status import JobStatus
from orch.storage.base import BucketRef

MANAGED_JOB_IDS_WORKFLOW = "ManagedJobIdsWorkflow"
MANAGED_JOB_IDS_WORKFLOW_ID = "managed-jobs"
ALLOCATE_UPDATE = "allocate"
STATE_QUERY = "state"
CANCEL_SIGNAL = "cancel"
MEMO_SUMMARY = "summary"

# The watch's long poll waits on the head up to this long for a change of the job (an end
# is seen within about a second whatever this is); without a change, one command per job
# per window: 2,000 jobs make 19 a second (activities/managed_job.py).
DEFAULT_POLL_S = 120.0
MAX_EVENTS = 200  # controller events kept in the state: the first ones and the latest
KEEP_FIRST_EVENTS = 20
FAILOVER_SAME_REGION_ROUNDS = 3  # FAILOVER: launch rounds in the old region before moving

BACKOFF_INITIAL_S = 60.0
BACKOFF_MULTIPLIER = 1.6
BACKOFF_MAX_FACTOR = 5  # the wait never exceeds 5x the initial one
BACKOFF_JITTER = 0.4  # +-40 %

# Launch failures caused by the cloud having no room (rather than by the request itself).
RESOURCE_ERRORS = frozenset({"CapacityError", "QuotaError", "TransientError"})


def managed_job_workflow_id(job_id: int) -> str:
    return f"job/{job_id}"


def job_id_of(workflow_id: str) -> int:
    """The job id in a ManagedJobWorkflow's id (``managed_job_workflow_id``)."""
    return int(workflow_id.removeprefix("job/"))


def job_cluster_name(job_id: int, task_index: int) -> str:
    return f"job-{job_id}-{task_index}"


class ManagedJobStatus(StrEnum):
    PENDING = "PENDING"  # waiting for a job slot, or backing off between launch rounds
    STARTING = "STARTING"  # launching the task's cluster
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"  # relaunching after a preemption, or restarting after an error
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the user's command failed
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_PRECHECKS = "FAILED_PRECHECKS"  # nothing could ever run it (no candidate, no access)
    FAILED_NO_RESOURCE = "FAILED_NO_RESOURCE"  # launch rounds exhausted
    FAILED_CONTROLLER = "FAILED_CONTROLLER"  # orch itself failed (never a worker's death)
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({
    ManagedJobStatus.SUCCEEDED,
    ManagedJobStatus.FAILED,
    ManagedJobStatus.FAILED_SETUP,
    ManagedJobStatus.FAILED_PRECHECKS,
    ManagedJobStatus.FAILED_NO_RESOURCE,
    ManagedJobStatus.FAILED_CONTROLLER,
    ManagedJobStatus.CANCELLED,
})

# How a job ended on its cluster (orch.runtime.jobs) → what that makes the task.
_TASK_STATUS = {
    JobStatus.SUCCEEDED: ManagedJobStatus.SUCCEEDED,
    JobStatus.FAILED: ManagedJobStatus.FAILED,
    JobStatus.FAILED_DRIVER: ManagedJobStatus.FAILED,
    JobStatus.FAILED_SETUP: ManagedJobStatus.FAILED_SETUP,
    JobStatus.CANCELLED: ManagedJobStatus.CANCELLED,
}
# Cluster job ends that count against max_restarts_on_errors (SkyPilot restarts both).
RESTARTABLE = frozenset({JobStatus.FAILED, JobStatus.FAILED_DRIVER, JobStatus.FAILED_SETUP})


def task_status_for(job_status: JobStatus) -> ManagedJobStatus:
    """The task's status once its job on the cluster ended with ``job_status``."""
    return _TASK_STATUS[job_status]


class ScheduleState(StrEnum):
    """What the job holds (SkyPilot's scheduler states). Only LAUNCHING may hold a launch
    permit (taken per provisioning round by FailoverWorkflow); ALIVE_BACKOFF holds none."""

    WAITING = "WAITING"  # for a job slot
    LAUNCHING = "LAUNCHING"
    ALIVE = "ALIVE"
    ALIVE_BACKOFF = "ALIVE_BACKOFF"
    DONE = "DONE"


class EventKind(StrEnum):
    SUBMITTED = "SUBMITTED"
    SLOT = "SLOT"
    LAUNCHING = "LAUNCHING"
    STEP = "STEP"  # a launch step or a failover hop, as LaunchWorkflow reports it
    LAUNCHED = "LAUNCHED"
    LAUNCH_FAILED = "LAUNCH_FAILED"
    BACKOFF = "BACKOFF"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    RESTARTING = "RESTARTING"
    TEARDOWN = "TEARDOWN"
    TASK_ENDED = "TASK_ENDED"
    CANCELLING = "CANCELLING"
    ENDED = "ENDED"


class ControllerEvent(BaseModel):
    """One thing the controller did, for ``orch jobs logs --controller``."""

    at: datetime
    kind: EventKind
    task: int | None = None
    message: str


class LaunchPhase(BaseModel):
    """Launch rounds with one constraint: pinned to a region, or avoiding some places."""

    pin: Placement | None = None  # relaunch only in this cloud and region
    blocklist: Blocklist = Field(default_factory=Blocklist)
    max_rounds: int | None = None  # None: until it works (or the job is cancelled)
    where: str = "anywhere"  # for the controller's events


class LaunchPlan(BaseModel):
    """Where a launch stands: its phases and how many rounds failed. Kept in the state so
    that a launch backing off for hours survives continue-as-new."""

    phases: list[LaunchPhase]
    recovering: bool = False
    phase: int = 0
    rounds: int = 0  # failed rounds in the current phase
    backoffs: int = 0  # backoff waits so far (each one longer)
    next_round_at: datetime | None = None

    @property
    def current(self) -> LaunchPhase:
        return self.phases[self.phase]


class TaskStage(StrEnum):
    PENDING = "PENDING"  # not started
    LAUNCH = "LAUNCH"  # running its launch plan
    WATCH = "WATCH"  # a job is on the cluster; watching it
    DONE = "DONE"


class TaskRun(BaseModel):
    """One task of the pipeline: its cluster as it is now, and what happened to it."""

    index: int
    name: str | None = None
    cluster_name: str
    name_on_cloud: str = ""  # the cluster's name on its cloud (orch.names); "": cluster_name
    status: ManagedJobStatus = ManagedJobStatus.PENDING
    stage: TaskStage = TaskStage.PENDING
    plan: LaunchPlan | None = None
    placement: Placement | None = None  # set once instances may exist (teardown needs it)
    info: ClusterInfo | None = None
    gcs_address: str | None = None
    resources: str = ""  # one-line summary of the cluster, for `orch status`
    cluster_up: bool = False
    launching: bool = False  # a launch round is in flight (left set if it was cut short)
    cluster_job_id: int = 0  # the latest job on the current cluster (0: none yet)
    attempt: int = 0  # jobs run for this task so far, across clusters (names its log)
    recoveries: int = 0
    restarts: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    failure: str | None = None
    usage: UsageClock = Field(default_factory=UsageClock)  # its clusters' time up (cost-report)
    storage: list[BucketMount] = Field(default_factory=list)  # on its current cluster

    @property
    def cloud_name(self) -> str:
        """The name the cluster's instances are tagged and found with."""
        return self.name_on_cloud or self.cluster_name


class CancelRequest(BaseModel):
    """The cancel signal's argument (none from ``orch jobs cancel ID`` or earlier
    clients). ``sent_by`` the bulk teardown's id: the job is cancelled on the entity's
    behalf (by ``orch jobs cancel -a`` or the entity), and the entity reads the job's
    result, so the job leaves its cluster there (``left_clusters``) instead of handing it
    over by a signal it would wait to see acknowledged."""

    sent_by: str = ""

    @property
    def by_bulk_teardown(self) -> bool:
        return self.sent_by == BULK_TEARDOWN_ID


class ManagedJobState(BaseModel):
    """Everything ManagedJobWorkflow knows; one model, carried across continue-as-new."""

    job_id: int
    name: str | None = None
    runs: list[TaskRun]
    current_task: int = 0
    status: ManagedJobStatus = ManagedJobStatus.PENDING
    schedule_state: ScheduleState = ScheduleState.WAITING
    submitted_at: datetime
    started_at: datetime | None = None  # first time a task ran
    ended_at: datetime | None = None
    slot_request_id: str | None = None  # the job slot held (a launch-semaphore request id)
    children: int = 0  # child workflows started so far (their ids stay unique)
    events: list[ControllerEvent] = Field(default_factory=list)
    events_dropped: int = 0
    failure: str | None = None
    # The buckets the job uses (beside its clusters) until it ends: kept across recoveries,
    # where they also pin each bucket's store.
    buckets: list[BucketRef] = Field(default_factory=list)
    # Clusters left to the bulk teardown that cancelled the job (``CancelRequest``): it
    # reads them from this, the job's result, and terminates them.
    left_clusters: list[HandedOver] = Field(default_factory=list)

    @property
    def current(self) -> TaskRun:
        return self.runs[min(self.current_task, len(self.runs) - 1)]

    @property
    def recoveries(self) -> int:
        return sum(run.recoveries for run in self.runs)

    def record(self, at: datetime, kind: EventKind, message: str,
               task: int | None = None) -> None:
        """Add an event; past MAX_EVENTS, the oldest after the first few is dropped."""
        self.events.append(ControllerEvent(at=at, kind=kind, task=task, message=message))
        if len(self.events) > MAX_EVENTS:
            del self.events[KEEP_FIRST_EVENTS]
            self.events_dropped += 1


def new_state(job_id: int, name: str | None, tasks: list[Task], now: datetime,
              plane_hash: str = "") -> ManagedJobState:
    """The state a job starts with; its clusters' names on cloud carry ``plane_hash``, so
    ``job-1-0`` of two control planes on one cloud account are different clusters."""
    runs = [TaskRun(index=i, name=t.name, cluster_name=job_cluster_name(job_id, i),
                    name_on_cloud=name_on_cloud(job_cluster_name(job_id, i), plane_hash))
            for i, t in enumerate(tasks)]
    return ManagedJobState(job_id=job_id, name=name, runs=runs, submitted_at=now)


# A job's workflow replays the commands of the revision its input was made for, so what
# changed is chosen by ``ManagedJobInput.revision``, not by a patch marker (which costs
# each job a search-attribute upsert): 0, jobs submitted before 5 December 2026, launch
# through a LaunchWorkflow child per round and upsert their memo and search attributes at
# each change; 1 runs the launch steps in the job's own workflow, upserts its memo and
# search attributes when its code next yields rather than at each change, the search
# attributes only when one of them changes, and records no patch marker
# (workflows/managed_job_base.py).
JOB_REVISION = 1


class ManagedJobInput(BaseModel):
    job_id: int
    name: str | None = None
    tasks: list[Task]
    publish_search_attributes: bool = True  # off on the time-skipping test server
    poll_interval_s: float = Field(default=DEFAULT_POLL_S, gt=0)
    max_launch_rounds: int | None = Field(default=None, ge=1)  # first launch; None: forever
    max_events_per_run: int = Field(default=4000, ge=100)
    requested_by: str = ""  # user@host of the caller (the Web UI's static details)
    plane_hash: str = ""  # the control plane's hash (orch.names); "" in older histories
    revision: int = 0  # JOB_REVISION when submitted; 0 in the inputs of older jobs
    state: ManagedJobState | None = None  # set by continue-as-new


class JobIdsInput(BaseModel):
    """Input of the job-id allocator workflow (``managed-jobs``)."""

    next_id: int = Field(default=1, ge=1)
    allocations_per_run: int = Field(default=500, ge=1)  # ~5 history events each


class JobSummary(BaseModel):
    """What `orch jobs queue` shows of a job; the workflow keeps it in its memo."""

    id: int
    name: str | None = None
    status: ManagedJobStatus
    schedule_state: ScheduleState
    task_index: int  # 0-based, as SkyPilot's task ids
    num_tasks: int
    task_name: str | None = None
    recoveries: int = 0
    submitted_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    cluster: str | None = None

    def duration_s(self, now: datetime) -> float | None:
        """Time since the job first ran (pending time excluded, as in SkyPilot)."""
        if self.started_at is None:
            return None
        return round(((self.ended_at or now) - self.started_at).total_seconds(), 1)


def summarize(state: ManagedJobState) -> JobSummary:
    run = state.current
    return JobSummary(
        id=state.job_id, name=state.name, status=state.status,
        schedule_state=state.schedule_state, task_index=run.index, num_tasks=len(state.runs),
        task_name=run.name, recoveries=state.recoveries, submitted_at=state.submitted_at,
        started_at=state.started_at, ended_at=state.ended_at,
        cluster=run.cluster_name if run.placement is not None else None,
    )


# -- recovery rules ------------------------------------------------------------------------
def job_recovery(task: Task) -> JobRecovery:
    """The task's ``job_recovery`` (on its resources or their first alternative)."""
    options = [task.resources, *task.resources.alternatives()]
    return next((r.job_recovery for r in options if r.job_recovery is not None), JobRecovery())


def _region_pinned(resources: Resources) -> bool:
    return all(r.region is not None or r.zone is not None for r in resources.alternatives())


def first_launch_plan(max_rounds: int | None) -> LaunchPlan:
    return LaunchPlan(phases=[LaunchPhase(max_rounds=max_rounds)])


def recovery_plan(task: Task, last: Placement | None) -> LaunchPlan:
    """The launch phases after a preemption in ``last`` (None: where is unknown).

    EAGER_NEXT_REGION: one round anywhere but the lost region (unless the user pinned the
    region: then nothing else could run it), then anywhere until it works.
    FAILOVER: a few rounds in the same cloud and region, then anywhere until it works.
    Moving to the next phase does not wait; rounds within a phase back off.
    """
    anywhere = LaunchPhase()
    if last is None:
        return LaunchPlan(phases=[anywhere], recovering=True)
    where = f"{last.cloud}/{last.region}"
    if job_recovery(task).strategy == RecoveryStrategy.FAILOVER:
        same = LaunchPhase(pin=Placement(cloud=last.cloud, region=last.region),
                           max_rounds=FAILOVER_SAME_REGION_ROUNDS, where=f"in {where} only")
        return LaunchPlan(phases=[same, anywhere], recovering=True)
    if _region_pinned(task.resources):
        return LaunchPlan(phases=[anywhere], recovering=True)
    block = BlockEntry(cloud=last.cloud, region=last.region, reason="preempted")
    elsewhere = LaunchPhase(blocklist=Blocklist(entries=[block]), max_rounds=1,
                            where=f"anywhere but {where}")
    return LaunchPlan(phases=[elsewhere, anywhere], recovering=True)


def backoff_seconds(backoffs: int, jitter: float) -> float:
    """The wait after ``backoffs`` earlier waits: 60 s, then x1.6 each time, never above
    5x; ``jitter`` in [0, 1) spreads it by +-40 % (and the cap still holds)."""
    cap = BACKOFF_INITIAL_S * BACKOFF_MAX_FACTOR
    base = min(BACKOFF_INITIAL_S * BACKOFF_MULTIPLIER ** backoffs, cap)
    return round(min(base * (1 + BACKOFF_JITTER * (2 * jitter - 1)), cap), 1)


def backoff_delay(backoffs: int, jitter: float) -> timedelta:
    return timedelta(seconds=backoff_seconds(backoffs, jitter))


class LaunchFailure(StrEnum):
    PRECHECK = "PRECHECK"  # nothing to try: no candidate, or only auth/config errors
    NO_RESOURCE = "NO_RESOURCE"  # the clouds had no room: back off and try again
    SETUP = "SETUP"  # the user's setup failed; the cluster is up
    CLUSTER = "CLUSTER"  # provisioned, but the nodes could not be made ready


def classify_launch_failure(error_type: str, activity: str, details: dict[str, Any]
                            ) -> LaunchFailure:
    """What a failed LaunchWorkflow means for the job, from the failure's error type, the
    activity that raised it ('' if none) and its details."""
    if error_type == "SetupError" and activity == "run_setup":
        return LaunchFailure.SETUP
    if error_type == "NoCandidatesError":
        return LaunchFailure.PRECHECK
    if error_type == "NoResourcesError":
        attempts = details.get("attempts") or []
        if any(a.get("error_type") in RESOURCE_ERRORS for a in attempts):
            return LaunchFailure.NO_RESOURCE
        return LaunchFailure.PRECHECK
    return LaunchFailure.CLUSTER


def describe_attempts(details: dict[str, Any]) -> str:
    """The failover hops of a failed launch, on one line."""
    hops = []
    for attempt in details.get("attempts") or []:
        candidate = attempt.get("candidate", {})
        where = "/".join(p for p in (candidate.get("cloud"), candidate.get("region"),
                                     attempt.get("zone")) if p)
        code = f" {attempt['code']}" if attempt.get("code") else ""
        hops.append(f"{where}: {attempt.get('error_type')}{code}")
    return "; ".join(hops)


def attempt_log_path(home: Path, job_id: int, task_index: int, attempt: int) -> Path:
    """Where the worker keeps the output of one attempt of one task (under $ORCH_HOME)."""
    return home / "managed_jobs" / str(job_id) / f"task-{task_index}.attempt-{attempt}.log"
