"""The bulk teardown's vocabulary: names and records (pure models).

A cancelled managed job does not tear its cluster down itself: it hands the cluster to
one entity workflow, ``BulkTeardownWorkflow`` (``orch-bulk-teardown``), and ends. The
entity terminates the clusters handed to it in batches, one ``teardown_clusters``
activity per cloud region for many clusters, then gives their job slots back to the
launch semaphore in one signal. Cancelling 2,000 jobs at once then costs the control
plane a few workflow-state writes per job instead of a TeardownWorkflow each (some 34
writes per job, the limit on how fast a cancel-all could go: README, Performance).

A cancel-all goes through the entity too (``CancelJobs``): ``orch jobs cancel -a`` hands
it the jobs' ids, then signals each job a cancel sent on the entity's behalf
(``managed_jobs.CancelRequest``), and the job then leaves its cluster in its result
(``ManagedJobState.left_clusters``) instead of signalling it over and waiting for the
entity's acknowledgement: the job ends in the workflow task of its cancel, and the
entity's ``cancel_jobs`` activity reads the clusters from the results (and signals any
job the CLI did not). That halves the writes of each job, and no longer sends 2,000 signals to one
workflow (each serialized on its lock, and each acknowledged to its sender).

Shared by the workflow (``workflows/bulk_teardown.py``), its activities
(``activities/bulk_teardown.py``) and the job workflow that hands clusters over.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from orch.semaphore import ReleaseRequest

BULK_TEARDOWN_WORKFLOW = "BulkTeardownWorkflow"
BULK_TEARDOWN_ID = "orch-bulk-teardown"
HAND_OVER_SIGNAL = "orch_cluster_handed_over"
TEARDOWN_CLUSTERS_ACTIVITY = "teardown_clusters"
HAND_OVER_ACTIVITY = "hand_over_cluster"
CANCEL_JOBS_SIGNAL = "orch_cancel_jobs"
CANCEL_JOBS_ACTIVITY = "cancel_jobs"
BULK_TEARDOWN_SUMMARY = ("bulk teardown: cancels managed jobs in bulk and terminates the "
                         "clusters of cancelled ones")


class HandedOver(BaseModel):
    """A cluster handed over for termination by the workflow that owned it."""

    owner: str  # the workflow id of the job that handed it over
    cluster_name: str  # orch's name (``job-<id>-<task>``)
    cloud_name: str  # the name its instances are tagged with on the cloud
    cloud: str
    region: str
    slot: ReleaseRequest | None = None  # given back once the cluster is gone


class CancelJobs(BaseModel):
    """Collect the clusters of these managed jobs (their workflow ids), cancelled on the
    entity's behalf; what ``orch jobs cancel -a`` sends before it signals them."""

    job_ids: list[str]


class Pending(BaseModel):
    """A handed-over cluster not terminated yet: waiting for a batch, or, after failed
    tries, for ``retry_at``."""

    cluster: HandedOver
    tries: int = 0
    retry_at: datetime | None = None
    last_error: str = ""


class BulkTeardownState(BaseModel):
    """What the entity carries through continue-as-new (nothing is in flight then)."""

    pending: list[Pending] = Field(default_factory=list)
    to_cancel: list[str] = Field(default_factory=list)  # job workflow ids not cancelled yet
    terminated: int = 0  # clusters terminated since the entity started
    given_up: list[str] = Field(default_factory=list)  # the latest clusters given up on


class BulkTeardownInput(BaseModel):
    state: BulkTeardownState = Field(default_factory=BulkTeardownState)
    max_events_per_run: int = Field(default=10_000, ge=100)


class ClustersRequest(BaseModel):
    """Terminate these clusters (names on the cloud) in one region of one cloud, wait
    until their instances are gone, and close their ports."""

    cloud: str
    region: str
    clusters: list[str]


class ClusterOutcome(BaseModel):
    """One cluster of a ``ClustersRequest``: the instances terminated, or why not."""

    cluster: str
    instances: list[str] = Field(default_factory=list)
    error: str = ""
