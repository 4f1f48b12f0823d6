"""The provider calls of one failover attempt, as FailoverWorkflow makes them (workflow
code: activities called by name, no I/O here).

An attempt in one zone is: quota check → bulk provision (all or nothing) → wait until
running → the nodes' addresses. Its partial nodes are removed (or stopped, for a cluster
that was ever up) and confirmed gone before the next try; a round that ends removes the
security groups and firewall rules its attempts made in a region.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import ClusterInfo, InstanceStatus, ProvisionConfig, ProvisionRecord
    from orch.contracts.provision import (
        CHECK_QUOTA,
        CLEANUP_PORTS,
        GET_CLUSTER_INFO,
        RUN_INSTANCES,
        STOP_INSTANCES,
        TERMINATE_INSTANCES,
        WAIT_INSTANCES_GONE,
        WAIT_RUNNING,
        InstancesRequest,
        ProvisionRequest,
        TeardownStarted,
        WaitGoneRequest,
        WaitRunningRequest,
    )
    from orch.failover_rules import Candidate
    from orch.spec import Resources, Task
    from orch.spec_resource_fields import image_for
    from orch.summaries import instances_call, provision_call
    from workflows.options import LONG_CALL, PROVIDER_CALL, error_message


def resources_of(task: Task, candidate: Candidate) -> Resources:
    """The resources ``candidate`` was planned for: its ``any_of``/``ordered`` choice (with
    that choice's image, disk, labels and ports), or the task's own."""
    choices = task.resources.alternatives()
    return choices[candidate.alternative] if candidate.alternative < len(choices) else choices[0]


def provision_config(task: Task, candidate: Candidate, zone: str | None, cloud_name: str,
                     token: str, ssh_public_key: str | None) -> ProvisionConfig:
    """What to ask the cloud for in ``zone`` of ``candidate``, for instances tagged
    ``cloud_name``; ``token`` makes a retried request create nothing twice."""
    resources = resources_of(task, candidate)
    return ProvisionConfig(
        cluster_name=cloud_name,
        num_nodes=task.num_nodes,
        region=candidate.region,
        zone=zone,
        instance_type=candidate.instance_type,
        accelerators=candidate.accelerators,
        use_spot=candidate.use_spot,
        disk_size=resources.disk_size,
        disk_tier=resources.disk_tier,
        network_tier=resources.network_tier,
        labels=resources.labels,
        image_id=image_for(resources.image_id, candidate.region),
        ports=resources.ports,
        idempotency_token=token,
        ssh_public_key=ssh_public_key,
        cpus=candidate.cpus,
        memory_gb=candidate.memory_gb,
    )


def stop_if_cancelled() -> None:
    """Raise the workflow's cancellation, which a call that completed after it absorbed."""
    if workflow.cancellation_reason() is not None:
        raise asyncio.CancelledError()


async def provision_nodes(provision: ProvisionRequest, instances: InstancesRequest,
                          display_name: str, on_create: Callable[[], None]) -> ClusterInfo:
    """Quota check, bulk provision, wait until running, then the nodes' addresses.
    ``on_create`` is told just before the instances are asked for.

    A cancel waits for the call in flight to end before the caller's cleanup: instances a
    RunInstances still under way creates after the terminate would leak. A call that then
    returns normally does not raise the cancel: ``stop_if_cancelled`` does."""
    wait_for_it = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    config, cloud, region = provision.config, provision.cloud, instances.region
    await workflow.execute_activity(
        CHECK_QUOTA, provision, **PROVIDER_CALL, cancellation_type=wait_for_it,
        summary=provision_call("quota", config, cloud))
    stop_if_cancelled()
    on_create()
    started = await workflow.execute_activity(
        RUN_INSTANCES, provision, result_type=ProvisionRecord, **PROVIDER_CALL,
        cancellation_type=wait_for_it, summary=provision_call("create", config, cloud))
    stop_if_cancelled()
    await workflow.execute_activity(
        WAIT_RUNNING, WaitRunningRequest(**instances.model_dump(),
                                         operations=started.operations),
        **LONG_CALL, cancellation_type=wait_for_it,
        summary=instances_call("describe", cloud, region, display_name) + " until running")
    stop_if_cancelled()
    info: ClusterInfo = await workflow.execute_activity(
        GET_CLUSTER_INFO, instances, result_type=ClusterInfo, **PROVIDER_CALL,
        cancellation_type=wait_for_it,
        summary=instances_call("describe", cloud, region, display_name) + ": addresses")
    stop_if_cancelled()
    return info


async def remove_partial(instances: InstancesRequest, was_up: bool) -> None:
    """Partial nodes must be gone (or stopped) before the next candidate is tried."""
    step = "stop" if was_up else "terminate"
    call = instances_call(step, instances.cloud, instances.region, instances.cluster_name)
    started = await workflow.execute_activity(
        STOP_INSTANCES if was_up else TERMINATE_INSTANCES, instances,
        result_type=TeardownStarted, **PROVIDER_CALL, summary=f"{call}: partial nodes")
    target = InstanceStatus.STOPPED if was_up else None
    await workflow.execute_activity(
        WAIT_INSTANCES_GONE, WaitGoneRequest(instances=instances, target=target,
                                             operations=started.operations),
        **LONG_CALL, summary=f"{call}: wait until {'stopped' if was_up else 'gone'}",
    )


async def clean_region(instances: InstancesRequest, display_name: str) -> str | None:
    """Remove the security groups and firewall rules of the cluster in the region of
    ``instances`` (its instances are gone already); None once done, else why not."""
    try:
        await workflow.execute_activity(
            CLEANUP_PORTS, instances, **PROVIDER_CALL,
            summary=f"remove the security groups and firewall rules of "
                    f"{display_name} in {instances.cloud} {instances.region}")
    except ActivityError as err:
        return error_message(err)
    return None
