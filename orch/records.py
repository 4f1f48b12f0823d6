"""The records that cross the Temporal boundary: workflow inputs, results and state.

They are plain pydantic models (no Temporal imports), shared by ``orch/client.py`` and
``workflows/``. Nothing here may hold a secret: every field is visible in the Web UI.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from orch.clouds.base import ClusterInfo
from orch.contracts.storage import BucketMount
from orch.failover_rules import Blocklist
from orch.lifecycle import Autostop, autostop_deadline
from orch.semaphore import SA_LAUNCH_HOLDERS, SA_LAUNCH_WAITING
from orch.spec import Task
from orch.status import ClusterStatus
from orch.storage.base import BucketRef

CLUSTER_WORKFLOW = "ClusterWorkflow"
LAUNCH_WORKFLOW = "LaunchWorkflow"
FAILOVER_WORKFLOW = "FailoverWorkflow"
TEARDOWN_WORKFLOW = "TeardownWorkflow"
MANAGED_JOB_WORKFLOW = "ManagedJobWorkflow"
# What a launch, start or exec cut short by `orch down` or a workflow cancel fails with.
CANCELLED = "Cancelled"
CANCELLED_MESSAGE = ("the operation was cancelled: by orch down, or by cancelling the "
                     "cluster's workflow (the nodes it was making were removed)")

# Custom search attributes (registered when the embedded dev server starts).
SA_CLUSTER = "OrchCluster"
SA_CLUSTER_STATUS = "OrchClusterStatus"
SA_CLOUD = "OrchCloud"
SA_REGION = "OrchRegion"
SA_NUM_NODES = "OrchNumNodes"
SA_RESOURCES = "OrchResources"
SA_AUTOSTOP = "OrchAutostop"
SA_JOB_ID = "OrchJobId"  # on a managed job's workflow, which also publishes its cluster's
SA_JOB_STATUS = "OrchJobStatus"
SA_USER = "OrchUser"  # user@host of whoever started the cluster or managed job
SA_JOB_NAME = "OrchJobName"  # a managed job's name
SA_SUMMARY = "OrchSummary"  # the static summary again: the Web UI's list shows attributes only
# A bucket's entity (orch.contracts.storage), which also sets OrchRegion and OrchUser. Its
# status is a one-item list: the visibility store holds no eleventh Keyword.
SA_STORAGE_USERS = "OrchStorageUsers"  # cluster/<name>, job/<id>
SA_STORAGE_PERSISTENT = "OrchStoragePersistent"
SA_STORAGE_STATUS = "OrchStorageStatus"
SEARCH_ATTRIBUTES = {
    SA_CLUSTER: "Keyword",
    SA_CLUSTER_STATUS: "Keyword",
    SA_CLOUD: "Keyword",
    SA_REGION: "Keyword",
    SA_NUM_NODES: "Int",
    SA_RESOURCES: "Keyword",
    SA_AUTOSTOP: "Keyword",
    SA_LAUNCH_HOLDERS: "Int",
    SA_LAUNCH_WAITING: "Int",
    SA_JOB_ID: "Keyword",  # the dev server allows at most 3 Int attributes
    SA_JOB_STATUS: "Keyword",
    SA_USER: "Keyword",  # the dev server's SQLite visibility holds at most 10 Keywords
    SA_JOB_NAME: "Keyword",
    SA_SUMMARY: "Text",
    SA_STORAGE_USERS: "KeywordList",
    SA_STORAGE_PERSISTENT: "Bool",
    SA_STORAGE_STATUS: "KeywordList",
}


def cluster_workflow_id(name: str) -> str:
    return f"cluster/{name}"


class Placement(BaseModel):
    """Where a cluster lives (known as soon as provisioning picks a candidate)."""

    cloud: str
    region: str
    zone: str | None = None
    instance_type: str | None = None
    use_spot: bool = False


class CloudRegion(BaseModel):
    """A region a cluster touched: where a launch attempt may have created something
    (instances, security groups, firewall rules, key pairs, resource groups) that its
    teardown must look for."""

    model_config = ConfigDict(frozen=True)

    cloud: str
    region: str


class ClusterUsage(BaseModel):
    """One stretch of a cluster's time up: where, how many nodes, how long (cost-report
    prices it with the catalog)."""

    placement: Placement
    num_nodes: int
    resources: str = ""
    seconds: float


class UsageClock(BaseModel):
    """The time up of a cluster, stretch by stretch (a stop ends one, a start begins the
    next), or of the clusters of a managed job's task one after another (one per
    recovery). Kept in the workflows' state; read by `orch cost-report`."""

    done: list[ClusterUsage] = Field(default_factory=list)
    up_since: datetime | None = None

    def up(self, now: datetime) -> None:
        self.up_since = self.up_since or now

    def gone(self, placement: Placement, num_nodes: int, resources: str, now: datetime
             ) -> None:
        if self.up_since is not None:
            self.done.append(ClusterUsage(
                placement=placement, num_nodes=num_nodes, resources=resources,
                seconds=max((now - self.up_since).total_seconds(), 0.0)))
        self.up_since = None

    def until(self, now: datetime, placement: Placement | None, num_nodes: int,
              resources: str) -> list[ClusterUsage]:
        """Every stretch, the current one (still up) counted to ``now``."""
        if self.up_since is None or placement is None:
            return list(self.done)
        current = ClusterUsage(placement=placement, num_nodes=num_nodes, resources=resources,
                               seconds=max((now - self.up_since).total_seconds(), 0.0))
        return [*self.done, current]


class ClusterRecord(BaseModel):
    """The state of one ClusterWorkflow; survives continue-as-new whole."""

    name: str
    name_on_cloud: str = ""  # see orch.names; "" (records made before it): the name itself
    status: ClusterStatus = ClusterStatus.INIT
    placement: Placement | None = None
    num_nodes: int = 0
    task_resources: str = ""  # a one-line summary for tables
    info: ClusterInfo | None = None
    gcs_address: str | None = None
    next_job_id: int = 1
    step: str = ""  # what the cluster is doing now, for progress displays
    events: list[str] = Field(default_factory=list)  # the latest steps and hops, oldest first
    event_count: int = 0  # how many events there ever were (``events`` keeps the last ones)

    @property
    def cloud_name(self) -> str:
        """The name the cloud's instances are tagged and found with."""
        return self.name_on_cloud or self.name

    def events_since(self, count: int) -> list[str]:
        """The events after the first ``count`` (as many as are still kept)."""
        new = self.event_count - count
        return self.events[-new:] if new > 0 else []
    last_error: str | None = None
    launched_at: datetime | None = None
    launched: Task | None = None  # nodes and resources of the launch: what `start` restores
    ever_up: bool = False  # once up, a cluster never fails over (its disks hold data)
    status_reason: str = ""  # why the status is what it is (after a refresh)
    warnings: list[str] = Field(default_factory=list)  # e.g. leaked instances
    autostop: Autostop | None = None
    last_activity_at: datetime | None = None  # the autostop clock's start
    autostop_check_after: datetime | None = None  # jobs were running: look again then
    last_refresh_at: datetime | None = None
    usage: UsageClock = Field(default_factory=UsageClock)  # time up, for cost-report
    # Every region where launch attempts may have left something (the placement's among
    # them): a failover reports a region before it creates there, and once it cleaned it.
    regions: list[CloudRegion] = Field(default_factory=list)
    # The buckets its launches attached (reported before attaching): unmounted by a stop,
    # released by its teardown, remounted by a start.
    storage: list[BucketMount] = Field(default_factory=list)

    def account_uptime(self, status: ClusterStatus, now: datetime) -> None:
        """Keep the billing clock: it runs from UP to STOPPED or TERMINATED, again from
        each UP after a start; time INIT while up (a degraded cluster found by a
        refresh) is billed too, as its instances still run."""
        if status == ClusterStatus.UP:
            self.usage.up(now)
        elif status in (ClusterStatus.STOPPED, ClusterStatus.TERMINATED) and self.placement:
            self.usage.gone(self.placement, self.num_nodes, self.task_resources, now)

    @property
    def autostop_at(self) -> datetime | None:
        deadline = autostop_deadline(self.autostop, self.last_activity_at)
        if deadline is None or self.autostop_check_after is None:
            return deadline
        return max(deadline, self.autostop_check_after)

    def autostop_summary(self) -> str:
        if self.autostop is None:
            return ""
        verb = "down" if self.autostop.down else "stop"
        at = self.autostop_at
        when = f", at {at:%Y-%m-%d %H:%M} UTC" if at else ""
        return f"{verb} after {self.autostop.idle_minutes} min idle{when}"


class ClusterInput(BaseModel):
    name: str
    name_on_cloud: str = ""  # computed by the client (orch.names); "" in older histories
    state: ClusterRecord | None = None
    publish_search_attributes: bool = True


class LaunchRequest(BaseModel):
    task: Task
    retry_until_up: bool = False
    autostop: Autostop | None = None
    requested_by: str = ""  # user@host of the caller, shown in the Web UI's details


class StopRequest(BaseModel):
    pass


class StartRequest(BaseModel):
    retry_until_up: bool = False


class AutostopRequest(BaseModel):
    setting: Autostop | None  # None cancels autostop


class LaunchResult(BaseModel):
    record: ClusterRecord
    job_id: int | None = None
    provisioned: bool = False  # False when an UP cluster was reused


class ExecRequest(BaseModel):
    task: Task


JOBS_UPDATE = "jobs"  # ClusterWorkflow: the head's job table, after cancels


class JobsRequest(BaseModel):
    cancel: list[int] = Field(default_factory=list)
    cancel_all: bool = False


class DownRequest(BaseModel):
    purge: bool = False


class CancelRequest(BaseModel):
    """Cut short the launch, start or exec under way (Ctrl-C in ``orch launch``)."""


class TeardownInput(BaseModel):
    cluster_name: str
    name_on_cloud: str = ""  # "": the cluster_name (inputs made before names on cloud)
    placement: Placement | None
    info: ClusterInfo | None = None
    terminate: bool = True
    regions: list[CloudRegion] = Field(default_factory=list)  # also cleaned, on terminate
    storage: list[BucketMount] = Field(default_factory=list)  # unmounted; on terminate,
    storage_user: str = ""  # ...released by this user (cluster/<name>)

    @property
    def cloud_name(self) -> str:
        return self.name_on_cloud or self.cluster_name


class TeardownResult(BaseModel):
    message: str
    instances: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class LaunchInput(BaseModel):
    cluster_name: str
    name_on_cloud: str = ""  # "": the cluster_name (inputs made before names on cloud)
    task: Task
    placement: Placement | None = None  # set for a cluster that exists: relaunch only there
    blocklist: Blocklist = Field(default_factory=Blocklist)  # places not to try (recovery)
    retry_until_up: bool = False
    was_up: bool = False  # partial nodes are stopped, not terminated
    reuse: ClusterInfo | None = None  # an UP cluster: skip provisioning
    gcs_address: str | None = None
    job_id: int | None = None
    requested_by: str = ""  # user@host of the caller (the Web UI's static details)
    purpose: str = ""  # why it launches, when not for a plain cluster (a managed job's task)
    storage_pins: list[BucketRef] = Field(default_factory=list)  # buckets already chosen
    storage_owner: str = ""  # a managed job (job/<id>) that uses the buckets beside the cluster

    @property
    def cloud_name(self) -> str:
        return self.name_on_cloud or self.cluster_name


PROGRESS_SIGNAL = "launch_progress"


class LaunchProgress(BaseModel):
    """A step of a launch, signalled to the cluster's workflow as it happens."""

    step: str
    earlier: list[str] = Field(default_factory=list)
    """Steps that went before ``step``, reported with it: a step that changes nothing
    but the display waits for the next report instead of costing a signal of its own."""
    placement: Placement | None = None
    info: ClusterInfo | None = None
    gcs_address: str | None = None
    waiting_for_permit: bool | None = None
    """True when the launch queues for a launch permit, False once it holds one."""
    touched: CloudRegion | None = None  # an attempt is about to create there
    cleaned: list[CloudRegion] = Field(default_factory=list)  # nothing of it left there
    storage: list[BucketMount] = Field(default_factory=list)  # about to be attached


class LaunchOutput(BaseModel):
    info: ClusterInfo
    placement: Placement
    gcs_address: str
