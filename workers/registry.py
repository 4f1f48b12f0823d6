"""What an orch worker hosts: every workflow and activity, on one task queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio.client import Client

from activities import bulk_teardown, managed_job, plan, provision, runtime
from activities.bulk_teardown import BulkTeardownActivities
from activities.semaphore import SemaphoreActivities
from activities.storage import PLAIN_STORAGE_ACTIVITIES, StorageActivities
from orch.clouds import simulated
from orch.semaphore import SemaphoreSettings
from orch.settings import load_settings
from workflows.bulk_teardown import BulkTeardownWorkflow
from workflows.cluster import ClusterWorkflow
from workflows.failover import FailoverWorkflow
from workflows.job_output import JobOutputWorkflow
from workflows.launch import LaunchWorkflow
from workflows.launch_semaphore import LaunchSemaphoreWorkflow
from workflows.managed_job import ManagedJobWorkflow
from workflows.managed_job_ids import ManagedJobIdsWorkflow
from workflows.storage import StorageWorkflow
from workflows.teardown import TeardownWorkflow

WORKFLOWS: list[type] = [
    ClusterWorkflow,
    LaunchWorkflow,
    FailoverWorkflow,
    TeardownWorkflow,
    BulkTeardownWorkflow,
    LaunchSemaphoreWorkflow,
    ManagedJobWorkflow,
    ManagedJobIdsWorkflow,
    StorageWorkflow,
    JobOutputWorkflow,
]

# Activities that need nothing but the machine they run on.
PLAIN_ACTIVITIES: list[Callable[..., Any]] = [
    plan.plan_candidates,
    provision.check_quota,
    provision.run_instances,
    provision.wait_running,
    provision.get_cluster_info,
    provision.query_instances,
    provision.stop_instances,
    provision.terminate_instances,
    provision.wait_instances_gone,
    provision.cleanup_ports,
    bulk_teardown.teardown_clusters,
    runtime.wait_for_nodes,
    runtime.setup_runtime,
    runtime.start_ray,
    runtime.sync_files,
    runtime.run_setup,
    runtime.submit_job,
    runtime.stop_ray,
    runtime.ray_healthy,
    runtime.jobs_activity,
    runtime.head_jobs,
    managed_job.watch_job,
    *PLAIN_STORAGE_ACTIVITIES,
]


def semaphore_settings() -> SemaphoreSettings:
    """Limits from the config's ``launch_permits`` (default 16) and ``job_slots`` (2,000),
    or ``ORCH_LAUNCH_PERMITS`` / ``ORCH_JOB_SLOTS``, which win; they apply when the
    semaphore is (re)started."""
    return SemaphoreSettings(limits=load_settings().permit_limits(),
                             publish_search_attributes=True)


def client_activities(client: Client, settings: SemaphoreSettings) -> list[Callable[..., Any]]:
    """Activities that talk to Temporal themselves (the semaphore's, the bulk teardown's
    hand-over and bulk cancel)."""
    semaphore, bulk = SemaphoreActivities(client, settings), BulkTeardownActivities(client)
    return [semaphore.request_permit, semaphore.find_closed_permit_holders,
            bulk.hand_over_cluster, bulk.cancel_jobs]


def storage_activities(client: Client, publish_search_attributes: bool = True
                       ) -> list[Callable[..., Any]]:
    """The storage activities that talk to Temporal (a bucket's entity, launch progress);
    ``publish_search_attributes`` is off on the time-skipping test server."""
    return StorageActivities(client, publish_search_attributes).activities()


def activity_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__temporal_activity_definition").name)


def with_simulated_cloud(chosen: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """``chosen`` with the simulated cloud's planning and runtime setup in place of orch's
    (benchmarks only: ``orch.clouds.simulated``)."""
    from activities.simulated import OVERRIDES

    replaced = {activity_name(fn) for fn in OVERRIDES}
    return [fn for fn in chosen if activity_name(fn) not in replaced] + OVERRIDES


def activities(client: Client) -> list[Callable[..., Any]]:
    chosen = (PLAIN_ACTIVITIES + client_activities(client, semaphore_settings())
              + storage_activities(client))
    return with_simulated_cloud(chosen) if simulated.enabled() else chosen
