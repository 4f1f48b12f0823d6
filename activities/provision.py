"""Activities over a cloud provider: quota, provisioning, queries and teardown."""

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
    WaitGoneRequest,
)
from orch.ssh_keys import ensure_key_pair
from orch.waiting import resumed, state_check, wait_until

# How long a cluster may take to reach RUNNING, counted from the wait's first attempt:
# an Azure create is 90-200 s on a good day, a GPU VM or a cold AMI far longer.
RUNNING_TIMEOUT_S = 900.0


@activity.defn(name=CHECK_QUOTA)
@typed_errors
@heartbeating
def check_quota(request: ProvisionRequest) -> None:
    get_provider(request.cloud).check_quota(request.config)


@activity.defn(name=RUN_INSTANCES)
@typed_errors
@heartbeating
def run_instances(request: ProvisionRequest) -> ProvisionRecord:
    config = request.config
    if request.cloud != "local" and config.ssh_public_key is None:
        config = config.model_copy(update={"ssh_public_key": ensure_key_pair()[1]})
    return get_provider(request.cloud).run_instances(config)


def wait_for(what: str, check: Callable[[], StateCheck], timeout_s: float) -> None:
    """Wait with :func:`orch.waiting.wait_until`, heartbeating the progress all along
    (also while a slow describe blocks), and resuming an earlier attempt's deadline."""
    progress = resumed(what, earlier_details(), time.time())
    with Heartbeats(progress.model_dump()) as beats:
        wait_until(check, progress, timeout_s, lambda p: beats.update(p.model_dump()))


@activity.defn(name=WAIT_RUNNING)
@typed_errors
def wait_running(request: InstancesRequest) -> None:
    region, cluster = request.region, request.cluster_name
    check = state_check(get_provider(request.cloud), region, cluster, InstanceStatus.RUNNING)
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
def stop_instances(request: InstancesRequest) -> list[str]:
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    provider.stop_instances(request.region, request.cluster_name, request.worker_only)
    return found


@activity.defn(name=TERMINATE_INSTANCES)
@typed_errors
@heartbeating
def terminate_instances(request: InstancesRequest) -> list[str]:
    """Terminate every instance tagged with the cluster; returns the ids found."""
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    provider.terminate_instances(request.region, request.cluster_name, request.worker_only)
    return found


@activity.defn(name=WAIT_INSTANCES_GONE)
@typed_errors
def wait_instances_gone(request: WaitGoneRequest) -> None:
    """Query until stopped (or terminated), heartbeating; a bounded wait that names the
    instances still in the way."""
    instances = request.instances
    provider = get_provider(instances.cloud)
    target = request.target

    def check() -> StateCheck:
        states = provider.query_instances(instances.region, instances.cluster_name)
        left = {i: s for i, s in states.items() if target is None or s != target}
        return StateCheck(done=not left,
                          seen=", ".join(f"{i}={s}" for i, s in sorted(left.items())))

    goal = target.value if target else "terminated"
    wait_for(f"{instances.cluster_name} {goal} in {instances.region}", check, request.timeout_s)


@activity.defn(name=CLEANUP_PORTS)
@typed_errors
@heartbeating
def cleanup_ports(request: InstancesRequest) -> None:
    get_provider(request.cloud).cleanup_ports(request.region, request.cluster_name)
