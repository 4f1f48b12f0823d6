"""The provider activities' contract: their names, and the records they take
(``activities/provision.py`` implements them; results are ``orch.clouds.base`` records).

Calls that start cloud work (``run_instances``, ``stop_instances``,
``terminate_instances``) return the operations still running, and the workflow hands them
to the wait that follows (``wait_running``, ``wait_instances_gone``): the wait needs
nothing but its input, so any worker can resume it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from orch.clouds.base import InstanceStatus, Operation, ProvisionConfig

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


class WaitRunningRequest(InstancesRequest):
    """Wait until every instance runs, once the operations ``run_instances`` started are
    over (none: requests made before operations were handed on)."""

    operations: list[Operation] = Field(default_factory=list)


class TeardownStarted(BaseModel):
    """What ``stop_instances`` or ``terminate_instances`` started: the instances it found,
    and the operations still running, for the wait that follows.

    Results recorded before operations were handed on are a bare list of instance ids;
    they still read as one (a history replayed, or a result of an older worker)."""

    instances: list[str] = Field(default_factory=list)
    operations: list[Operation] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_ids(cls, value: Any) -> Any:
        return {"instances": value} if isinstance(value, list) else value


class WaitGoneRequest(BaseModel):
    """Poll until no instance is left in a state other than ``target`` (STOPPED), or none at
    all when ``target`` is None (terminated), once ``operations`` are over."""

    instances: InstancesRequest
    target: InstanceStatus | None = None
    timeout_s: float = 1800  # an Azure resource-group delete can take more than 10 minutes
    operations: list[Operation] = Field(default_factory=list)
