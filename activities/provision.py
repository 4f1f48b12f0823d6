"""Activities over a cloud provider: quota, provisioning, queries and teardown."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pydantic import BaseModel
from temporalio import activity

from activities.errors import typed_errors
from activities.heartbeat import Heartbeats, earlier_details, heartbeating
from orch.clouds import get_provider
from orch.clouds.base import (
    ClusterInfo,
    InstanceStatus,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.ssh_keys import ensure_key_pair
from orch.waiting import resumed, state_check, wait_until

# How long a cluster may take to reach RUNNING, counted from the wait's first attempt:
# an Azure create is 90-200 s on a good day, a GPU VM or a cold AMI far longer.
RUNNING_TIMEOUT_S = 900.0


class ProvisionRequest(BaseModel):
    cloud: str
    config: ProvisionConfig


class InstancesRequest(BaseModel):
    cloud: str
    region: str
    cluster_name: str
    worker_only: bool = False


class WaitGoneRequest(BaseModel):
    """Poll until no instance is left in a state other than ``target`` (STOPPED), or none at
    all when ``target`` is None (terminated)."""

    instances: InstancesRequest
    target: InstanceStatus | None = None
    timeout_s: float = 600


@activity.defn
@typed_errors
@heartbeating
def check_quota(request: ProvisionRequest) -> None:
    get_provider(request.cloud).check_quota(request.config)


@activity.defn
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


@activity.defn
@typed_errors
def wait_running(request: InstancesRequest) -> None:
    region, cluster = request.region, request.cluster_name
    check = state_check(get_provider(request.cloud), region, cluster, InstanceStatus.RUNNING)
    wait_for(f"{cluster} RUNNING in {region}", check, RUNNING_TIMEOUT_S)


def use_internal_ips() -> bool:
    """``ORCH_SSH_USE_INTERNAL_IPS=1`` (SkyPilot's use_internal_ips): reach nodes at their
    private addresses, for workers inside the cloud network or over a VPN."""
    return os.environ.get("ORCH_SSH_USE_INTERNAL_IPS", "") not in ("", "0", "false")


@activity.defn
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


@activity.defn
@typed_errors
@heartbeating
def query_instances(request: InstancesRequest) -> dict[str, InstanceStatus]:
    return get_provider(request.cloud).query_instances(request.region, request.cluster_name)


@activity.defn
@typed_errors
@heartbeating
def stop_instances(request: InstancesRequest) -> list[str]:
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    provider.stop_instances(request.region, request.cluster_name, request.worker_only)
    return found


@activity.defn
@typed_errors
@heartbeating
def terminate_instances(request: InstancesRequest) -> list[str]:
    """Terminate every instance tagged with the cluster; returns the ids found."""
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    provider.terminate_instances(request.region, request.cluster_name, request.worker_only)
    return found


@activity.defn
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


@activity.defn
@typed_errors
@heartbeating
def cleanup_ports(request: InstancesRequest) -> None:
    get_provider(request.cloud).cleanup_ports(request.region, request.cluster_name)
