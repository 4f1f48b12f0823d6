"""The provider activities' contract: their names, and the records they take
(``activities/provision.py`` implements them; results are ``orch.clouds.base`` records)."""

from __future__ import annotations

from pydantic import BaseModel

from orch.clouds.base import InstanceStatus, ProvisionConfig

CHECK_QUOTA = "check_quota"
RUN_INSTANCES = "run_instances"
WAIT_RUNNING = "wait_running"
GET_CLUSTER_INFO = "get_cluster_info"
QUERY_INSTANCES = "query_instances"
STOP_INSTANCES = "stop_instances"
TERMINATE_INSTANCES = "terminate_instances"
WAIT_INSTANCES_GONE = "wait_instances_gone"
CLEANUP_PORTS = "cleanup_ports"


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
