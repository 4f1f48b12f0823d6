"""Activities over a cloud provider: quota, provisioning, queries and teardown.

Provider calls are short; every wait goes through :func:`wait_for` (the one waiter,
``orch.waiting``), which heartbeats its progress and, after a worker crash, resumes on
another worker with the deadline of the first attempt:

* ``run_instances`` calls the provider until it has started every instance (a call may
  first need instances to finish stopping, or an Azure network to exist) and returns the
  operations still running; ``wait_running`` waits for them, then for RUNNING;
* ``stop_instances`` and ``terminate_instances`` start and return theirs
  (:class:`TeardownStarted`); ``wait_instances_gone`` waits for them, then for the
  instances to be stopped or gone;
* ``cleanup_ports`` starts closing the ports and waits for that itself (seconds).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from temporalio import activity

from activities.errors import typed_errors
from activities.heartbeat import Heartbeats, earlier_details, heartbeating
from orch.clouds import get_provider
from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    Operation,
    Provider,
    ProvisionRecord,
    StateCheck,
)
from orch.contracts.provision import (
    CHECK_QUOTA,
    CLEANUP_PORTS,
    GET_CLUSTER_INFO,
    QUERY_INSTANCES,
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
from orch.ssh_keys import ensure_key_pair
from orch.waiting import (
    StartInstances,
    after_operations,
    resumed,
    state_check,
    wait_until,
)

# How long a cluster may take to reach RUNNING, counted from the wait's first attempt:
# an Azure create is 90-200 s on a good day, a GPU VM or a cold AMI far longer.
RUNNING_TIMEOUT_S = 900.0
# How long run_instances may wait before it has started everything: a GCP instance still
# stopping (30-90 s), an Azure VM's network (seconds per resource, four in a row).
START_TIMEOUT_S = 300.0
# How long closing a cluster's ports may take (a GCP firewall operation: seconds).
PORTS_TIMEOUT_S = 120.0


@activity.defn(name=CHECK_QUOTA)
@typed_errors
@heartbeating
def check_quota(request: ProvisionRequest) -> None:
    get_provider(request.cloud).check_quota(request.config)


@activity.defn(name=RUN_INSTANCES)
@typed_errors
def run_instances(request: ProvisionRequest) -> ProvisionRecord:
    """Start the cluster's instances; returns the operations still running. The provider
    is called again, through the waiter, while it still waits for something before it
    can start them all (each call goes on where the last one stopped)."""
    config = request.config
    if request.cloud != "local" and config.ssh_public_key is None:
        config = config.model_copy(update={"ssh_public_key": ensure_key_pair()[1]})
    start = StartInstances(get_provider(request.cloud), config)
    wait_for(f"{config.cluster_name} started in {config.region}", start, START_TIMEOUT_S)
    return start.record


def wait_for(what: str, check: Callable[[], StateCheck], timeout_s: float) -> None:
    """Wait with :func:`orch.waiting.wait_until`, heartbeating the progress all along
    (also while a slow describe blocks), and resuming an earlier attempt's deadline."""
    progress = resumed(what, earlier_details(), time.time())
    with Heartbeats(progress.model_dump()) as beats:
        wait_until(check, progress, timeout_s, lambda p: beats.update(p.model_dump()))


@activity.defn(name=WAIT_RUNNING)
@typed_errors
def wait_running(request: WaitRunningRequest) -> None:
    region, cluster = request.region, request.cluster_name
    provider = get_provider(request.cloud)
    check = after_operations(provider, region, cluster, request.operations,
                             state_check(provider, region, cluster, InstanceStatus.RUNNING))
    wait_for(f"{cluster} RUNNING in {region}", check, RUNNING_TIMEOUT_S)


def use_internal_ips() -> bool:
    """``ORCH_SSH_USE_INTERNAL_IPS=1`` (SkyPilot's use_internal_ips): reach nodes at their
    private addresses, for workers inside the cloud network or over a VPN."""
    return os.environ.get("ORCH_SSH_USE_INTERNAL_IPS", "") not in ("", "0", "false")


@activity.defn(name=GET_CLUSTER_INFO)
@typed_errors
@heartbeating
def get_cluster_info(request: InstancesRequest) -> ClusterInfo:
    """The cluster's nodes, completed with what only this worker knows: where orch's
    private key is, and whether to use private addresses."""
    info = get_provider(request.cloud).get_cluster_info(request.region, request.cluster_name)
    key_path = str(ensure_key_pair()[0]) if request.cloud != "local" else None
    nodes = [
        node.model_copy(update={
            "ssh_key_path": node.ssh_key_path or key_path,
            "external_ip": None if use_internal_ips() else node.external_ip,
        }) if node.runner == "ssh" else node
        for node in info.nodes
    ]
    return info.model_copy(update={"nodes": nodes})


@activity.defn(name=QUERY_INSTANCES)
@typed_errors
@heartbeating
def query_instances(request: InstancesRequest) -> dict[str, InstanceStatus]:
    return get_provider(request.cloud).query_instances(request.region, request.cluster_name)


@activity.defn(name=STOP_INSTANCES)
@typed_errors
@heartbeating
def stop_instances(request: InstancesRequest) -> TeardownStarted:
    """Start stopping every instance tagged with the cluster."""
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    operations = provider.stop_instances(request.region, request.cluster_name,
                                         request.worker_only)
    return TeardownStarted(instances=found, operations=operations)


@activity.defn(name=TERMINATE_INSTANCES)
@typed_errors
@heartbeating
def terminate_instances(request: InstancesRequest) -> TeardownStarted:
    """Start terminating every instance tagged with the cluster (and, for the whole
    cluster, what the cloud removes with it: Azure's resource group)."""
    return start_terminate(get_provider(request.cloud), request.region, request.cluster_name,
                           request.worker_only)


def start_terminate(provider: Provider, region: str, cluster: str,
                    worker_only: bool = False) -> TeardownStarted:
    """The cluster's instances as found, and the operations terminating them started."""
    found = list(provider.query_instances(region, cluster))
    operations = provider.terminate_instances(region, cluster, worker_only)
    return TeardownStarted(instances=found, operations=operations)


@activity.defn(name=WAIT_INSTANCES_GONE)
@typed_errors
def wait_instances_gone(request: WaitGoneRequest) -> None:
    """Query until stopped (or terminated), once the operations the stop or terminate
    started are over, heartbeating; a bounded wait that names what is still in the way."""
    instances = request.instances
    provider = get_provider(instances.cloud)
    region, cluster, target = instances.region, instances.cluster_name, request.target
    goal = target.value if target else "terminated"
    wait_for(f"{cluster} {goal} in {region}",
             after_operations(provider, region, cluster, request.operations,
                              gone_check(provider, region, cluster, target)),
             request.timeout_s)


def gone_check(provider: Provider, region: str, cluster: str,
               target: InstanceStatus | None) -> Callable[[], StateCheck]:
    """Done when no instance of the cluster is left in a state other than ``target``
    (none at all: terminated)."""

    def gone() -> StateCheck:
        states = provider.query_instances(region, cluster)
        left = {i: s for i, s in states.items() if target is None or s != target}
        return StateCheck(done=not left,
                          seen=", ".join(f"{i}={s}" for i, s in sorted(left.items())))

    return gone


@activity.defn(name=CLEANUP_PORTS)
@typed_errors
def cleanup_ports(request: InstancesRequest) -> None:
    """Remove the cluster's security groups or firewall rules in the region, and wait for
    the cloud to be done with that."""
    provider = get_provider(request.cloud)
    wait_for(f"ports of {request.cluster_name} closed in {request.region}",
             started_check(provider, request.region, request.cluster_name,
                           provider.cleanup_ports), PORTS_TIMEOUT_S)


def started_check(provider: Provider, region: str, cluster: str,
                  start: Callable[[str, str], list[Operation]]) -> Callable[[], StateCheck]:
    """A check whose first look starts the work (so that the call heartbeats as the polls
    do; a retried attempt starts it again, which the call allows), then follows it."""
    operations: list[Operation] | None = None

    def check() -> StateCheck:
        nonlocal operations
        if operations is None:
            operations = start(region, cluster)
        return provider.check_operations(region, cluster, operations)

    return check
