"""Activities over a cloud provider: quota, provisioning, queries and teardown."""

from __future__ import annotations

import os
import time

from pydantic import BaseModel
from temporalio import activity

from activities.errors import typed_errors
from orch.clouds import get_provider
from orch.clouds.base import ClusterInfo, InstanceStatus, ProvisionConfig, ProvisionRecord
from orch.clouds.errors import TransientError
from orch.ssh_keys import ensure_key_pair

POLL_S = 2.0


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
def check_quota(request: ProvisionRequest) -> None:
    get_provider(request.cloud).check_quota(request.config)


@activity.defn
@typed_errors
def run_instances(request: ProvisionRequest) -> ProvisionRecord:
    config = request.config
    if request.cloud != "local" and config.ssh_public_key is None:
        config = config.model_copy(update={"ssh_public_key": ensure_key_pair()[1]})
    return get_provider(request.cloud).run_instances(config)


@activity.defn
@typed_errors
def wait_running(request: InstancesRequest) -> None:
    get_provider(request.cloud).wait_instances(
        request.region, request.cluster_name, InstanceStatus.RUNNING
    )


def use_internal_ips() -> bool:
    """``ORCH_SSH_USE_INTERNAL_IPS=1`` (SkyPilot's use_internal_ips): reach nodes at their
    private addresses, for workers inside the cloud network or over a VPN."""
    return os.environ.get("ORCH_SSH_USE_INTERNAL_IPS", "") not in ("", "0", "false")


@activity.defn
@typed_errors
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
def query_instances(request: InstancesRequest) -> dict[str, InstanceStatus]:
    return get_provider(request.cloud).query_instances(request.region, request.cluster_name)


@activity.defn
@typed_errors
def stop_instances(request: InstancesRequest) -> list[str]:
    provider = get_provider(request.cloud)
    found = list(provider.query_instances(request.region, request.cluster_name))
    provider.stop_instances(request.region, request.cluster_name, request.worker_only)
    return found


@activity.defn
@typed_errors
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
    provider = get_provider(request.instances.cloud)
    deadline = time.monotonic() + request.timeout_s
    while True:
        states = provider.query_instances(request.instances.region, request.instances.cluster_name)
        left = {i: s for i, s in states.items() if request.target is None or s != request.target}
        if not left:
            return
        activity.heartbeat(left)
        if time.monotonic() > deadline:
            listing = ", ".join(f"{i} ({s})" for i, s in sorted(left.items()))
            goal = request.target or "terminated"
            raise TransientError(f"instances not {goal} after {request.timeout_s:g} s: {listing}")
        time.sleep(POLL_S)


@activity.defn
@typed_errors
def cleanup_ports(request: InstancesRequest) -> None:
    get_provider(request.cloud).cleanup_ports(request.region, request.cluster_name)
