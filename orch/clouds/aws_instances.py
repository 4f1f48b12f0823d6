"""A cluster's EC2 instances: found by tag, ordered head first, named by node index.

Every instance carries the cluster tag, its kind (head/worker) and its node index
(head 0, workers 1..N-1). The index makes creation idempotent node by node: node i is
always launched with the ClientToken derived from (attempt token, cluster, region, i), so
a retried call re-sends exactly the request whose answer was lost and EC2 answers with
the instance it already made, even while DescribeInstances does not list it yet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from orch.clouds.base import TAG_CLUSTER, TAG_NODE_KIND, InstanceStatus

TAG_NODE_INDEX = "orch-node-index"
HEAD, WORKER = "head", "worker"

STATUS_OF_STATE = {
    "pending": InstanceStatus.PENDING,
    "running": InstanceStatus.RUNNING,
    "stopping": InstanceStatus.STOPPING,
    "stopped": InstanceStatus.STOPPED,
    "shutting-down": InstanceStatus.TERMINATING,
}
LIVE_STATES = tuple(STATUS_OF_STATE)  # every state but "terminated"


def describe_cluster(
    ec2: Any, cluster_name: str, states: tuple[str, ...], *, workers_only: bool = False
) -> list[dict[str, Any]]:
    """The cluster's instances in ``states``, head first."""
    filters = [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_name]},
        {"Name": "instance-state-name", "Values": list(states)},
    ]
    if workers_only:
        filters.append({"Name": f"tag:{TAG_NODE_KIND}", "Values": [WORKER]})
    instances = [
        instance
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters)
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    ]
    return sorted(instances, key=_order)


def state_name(instance: dict[str, Any]) -> str:
    return str(instance["State"]["Name"])


def tag(instance: dict[str, Any], key: str) -> str | None:
    for item in instance.get("Tags", []):
        if item.get("Key") == key:
            return str(item.get("Value", ""))
    return None


def is_head(instance: dict[str, Any]) -> bool:
    return tag(instance, TAG_NODE_KIND) == HEAD


def node_index(instance: dict[str, Any]) -> int | None:
    """0 for the head; a worker's index tag; None for a worker without one."""
    if is_head(instance):
        return 0
    value = tag(instance, TAG_NODE_INDEX) or ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def _order(instance: dict[str, Any]) -> tuple[int, str]:
    index = node_index(instance)
    return (index if index is not None else 1 << 30, str(instance["InstanceId"]))


def missing_indices(instances: list[dict[str, Any]], num_nodes: int) -> list[int]:
    """The node indices to create so that ``instances`` grow to ``num_nodes``, head first."""
    taken = {node_index(i) for i in instances}
    free = [i for i in range(num_nodes) if i not in taken]
    return free[: max(0, num_nodes - len(instances))]


def client_token(idempotency_token: str, cluster_name: str, region: str, index: int) -> str | None:
    """RunInstances' ClientToken for node ``index`` (at most 64 ASCII characters).

    None without an attempt token: a token reused across attempts would make EC2 answer a
    new launch with the instances of an old, maybe terminated, one.
    """
    if not idempotency_token:
        return None
    key = f"{idempotency_token}\0{cluster_name}\0{region}\0{index}"
    return hashlib.sha256(key.encode()).hexdigest()


def node_tag_specifications(cluster_name: str, index: int,
                            labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """orch's tags (the cluster tag first: volumes get only it), then the task's labels; a
    label ``Name`` replaces orch's display name."""
    kind = HEAD if index == 0 else WORKER
    name = f"{cluster_name}-{kind}" + (f"-{index}" if index else "")
    given = dict(labels or {})
    tags = [
        {"Key": TAG_CLUSTER, "Value": cluster_name},
        {"Key": TAG_NODE_KIND, "Value": kind},
        {"Key": TAG_NODE_INDEX, "Value": str(index)},
        {"Key": "Name", "Value": given.pop("Name", name)},
        *({"Key": key, "Value": value} for key, value in given.items()),
    ]
    return [{"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags[:1]}]
