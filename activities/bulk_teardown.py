"""Activities of the bulk teardown (``workflows/bulk_teardown.py``).

``teardown_clusters`` empties many clusters of one cloud region in one activity: for each,
the same provider calls as TeardownWorkflow's terminate (find the instances, terminate
them, wait until they are gone, close the ports), on a pool of threads. One activity for
hundreds of clusters is the point: the control plane records three workflow-state writes
for it, not some 20 per cluster. A cluster whose calls fail is reported with its error and
does not hold up the others; the workflow tries it again later.

Crash-safe: every step is idempotent (a terminated cluster has no instances left to find,
and closing ports that are closed does nothing), and the clusters already emptied are the
heartbeat details, so an attempt after a worker crash goes on with the rest.

``hand_over_cluster`` signal-with-starts the entity, for a job that found it not running
(a workflow cannot signal-with-start). ``cancel_jobs`` reads the clusters that many
managed jobs, cancelled on the entity's behalf, left in their results, and cancels those
that the CLI did not.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from activities.errors import typed_errors
from activities.heartbeat import Heartbeats, beating, earlier_details
from activities.provision import PORTS_TIMEOUT_S, gone_check, start_terminate, started_check
from orch.bulk_teardown import (
    CANCEL_JOBS_ACTIVITY,
    HAND_OVER_ACTIVITY,
    HAND_OVER_SIGNAL,
    TEARDOWN_CLUSTERS_ACTIVITY,
    CancelJobs,
    ClusterOutcome,
    ClustersRequest,
    HandedOver,
)
from orch.client.bulk_teardown import cancel_for_bulk_teardown, signal_bulk_teardown
from orch.clouds import get_provider
from orch.clouds.base import Provider
from orch.contracts.provision import WaitGoneRequest
from orch.managed_jobs import ManagedJobState
from orch.waiting import WaitProgress, after_operations, wait_until

# Clusters emptied at once by one activity: each mostly waits on its cloud's answers.
CLUSTERS_AT_ONCE = 32
GONE_TIMEOUT_S = WaitGoneRequest.model_fields["timeout_s"].default
# cancel_jobs: its reads of the jobs' results (each a long poll until the job ends), and
# its own signals, in flight at once. The entity runs a few cancel_jobs at once.
READS_AT_ONCE = 100
SIGNALS_AT_ONCE = 16
# How long a job may take to end on the signal ``orch jobs cancel -a`` sends it before the
# activity signals it itself (a second cancel is ignored, but costs a write when the
# server is busiest): at 2,000 on this machine, the CLI took 84.7 s for its signals, and a
# job's task started up to 79 s after its signal (README, Performance).
SIGNAL_GRACE_S = 120.0


def empty_cluster(provider: Provider, region: str, cluster: str) -> list[str]:
    """Terminate one cluster's instances, wait until they are gone, close its ports;
    returns the instances found."""
    started = start_terminate(provider, region, cluster)
    wait_until(after_operations(provider, region, cluster, started.operations,
                                gone_check(provider, region, cluster, None)),
               WaitProgress(what=f"{cluster} terminated in {region}", since=time.time()),
               GONE_TIMEOUT_S, lambda _: None)
    wait_until(started_check(provider, region, cluster, provider.cleanup_ports),
               WaitProgress(what=f"ports of {cluster} closed in {region}", since=time.time()),
               PORTS_TIMEOUT_S, lambda _: None)
    return started.instances


def _outcome(provider: Provider, region: str, cluster: str) -> ClusterOutcome:
    try:
        return ClusterOutcome(cluster=cluster, instances=empty_cluster(provider, region, cluster))
    except Exception as err:  # one cluster's failure must not hold up the others
        return ClusterOutcome(cluster=cluster, error=f"{type(err).__name__}: {err}")


@activity.defn(name=TEARDOWN_CLUSTERS_ACTIVITY)
@typed_errors
def teardown_clusters(request: ClustersRequest) -> list[ClusterOutcome]:
    """Empty every cluster of the request (see the module docstring); one outcome per
    cluster, in the request's order. Clusters an earlier attempt emptied (its heartbeat
    details) are reported as done without calling the cloud again."""
    provider = get_provider(request.cloud)
    earlier = earlier_details()
    done: dict[str, ClusterOutcome] = {}
    if isinstance(earlier, list):
        done = {o.cluster: o for o in map(ClusterOutcome.model_validate, earlier)}
    todo = [c for c in dict.fromkeys(request.clusters) if c not in done]
    with Heartbeats([o.model_dump() for o in done.values()]) as beats, \
            ThreadPoolExecutor(max_workers=CLUSTERS_AT_ONCE,
                               thread_name_prefix="teardown") as pool:
        futures = [pool.submit(_outcome, provider, request.region, c) for c in todo]
        for future in as_completed(futures):
            outcome = future.result()
            done[outcome.cluster] = outcome
            beats.update([o.model_dump() for o in done.values() if not o.error])
    return [done[c] for c in request.clusters]


class BulkTeardownActivities:
    """The activities that need a Temporal client: built once per worker."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=HAND_OVER_ACTIVITY)
    async def hand_over_cluster(self, cluster: HandedOver) -> None:
        """Signal-with-start: hand the cluster over, starting the entity if none runs.
        A retry may hand it over twice; the entity keeps one of each."""
        await signal_bulk_teardown(self._client, activity.info().task_queue, HAND_OVER_SIGNAL,
                                   cluster)

    @activity.defn(name=CANCEL_JOBS_ACTIVITY)
    async def cancel_jobs(self, request: CancelJobs) -> list[HandedOver]:
        """Read from each job's result the clusters it left (``ManagedJobState.
        left_clusters``). ``orch jobs cancel -a`` signals the jobs itself once the entity
        has their ids; a job still running ``SIGNAL_GRACE_S`` after its read began (that
        CLI died before its signal, or an older CLI sent none) is signalled from here, on
        the entity's behalf, and read again.

        Safe to retry: a job ignores a second cancel, a job that ended is not signalled
        (its result still says what it left), and a cluster read twice is queued once by
        the entity, or terminated again, which finds nothing (its slot's second release
        is ignored)."""
        signals, reads = asyncio.Semaphore(SIGNALS_AT_ONCE), asyncio.Semaphore(READS_AT_ONCE)

        async def left(job_id: str, wait_s: float | None) -> list[HandedOver] | None:
            """The job's clusters, or None if it was still running after ``wait_s``."""
            handle = self._client.get_workflow_handle(job_id, result_type=ManagedJobState)
            async with reads:
                try:
                    return (await asyncio.wait_for(handle.result(), wait_s)).left_clusters
                except TimeoutError:
                    return None
                except WorkflowFailureError:  # failed or terminated: it left nothing here
                    return []
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:  # past the retention
                        return []
                    raise

        async def cancelled(job_id: str) -> list[HandedOver]:
            clusters = await left(job_id, SIGNAL_GRACE_S)
            if clusters is not None:
                return clusters
            async with signals:
                await cancel_for_bulk_teardown(self._client, job_id)
            return await left(job_id, None) or []

        async with beating(f"cancelling {len(request.job_ids)} job(s)"):
            lefts = await asyncio.gather(*(cancelled(job_id) for job_id in request.job_ids))
        return [cluster for clusters in lefts for cluster in clusters]
