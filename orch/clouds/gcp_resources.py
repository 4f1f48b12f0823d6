"""Compute Engine resources as orch names and builds them: instance and firewall names,
labels, request bodies, and the reading of Instance resources back into orch's records.

Names are deterministic (``<cluster>-head``, ``<cluster>-worker-<i>``) so that a repeated
insert meets ``alreadyExists`` instead of creating a second machine.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from orch.clouds.base import TAG_CLUSTER, TAG_NODE_KIND, InstanceStatus, NodeInfo, ProvisionConfig
from orch.clouds.tiers import gcp_disk, wants_best_network

HEAD, WORKER = "head", "worker"
DEFAULT_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
DEFAULT_NETWORK = "global/networks/default"
TIER_1_MIN_VCPUS = 30  # GCP's Tier_1 networking needs N2/C2/C3/... types this large
_MAX_CLUSTER_PART = 40  # leaves room for "-worker-<i>" within GCP's 63 characters
_GCP_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

_STATUS = {
    "PROVISIONING": InstanceStatus.PENDING,
    "STAGING": InstanceStatus.PENDING,
    "REPAIRING": InstanceStatus.PENDING,
    "RUNNING": InstanceStatus.RUNNING,
    "STOPPING": InstanceStatus.STOPPING,
    "SUSPENDING": InstanceStatus.STOPPING,
    # GCP calls a stopped instance TERMINATED; a deleted one is simply gone.
    "TERMINATED": InstanceStatus.STOPPED,
    "STOPPED": InstanceStatus.STOPPED,
    "SUSPENDED": InstanceStatus.STOPPED,
}


def cloud_cluster_name(cluster_name: str) -> str:
    """The cluster's name on GCP: itself when it is a valid resource name and short
    enough, otherwise a lowercase slug plus a hash of the original (so distinct orch
    names stay distinct)."""
    if _GCP_NAME.match(cluster_name) and len(cluster_name) <= _MAX_CLUSTER_PART:
        return cluster_name
    slug = re.sub(r"[^a-z0-9-]+", "-", cluster_name.lower()).strip("-")
    if not slug[:1].isalpha():
        slug = f"c-{slug}".rstrip("-")
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:8]
    return f"{slug[: _MAX_CLUSTER_PART - 9].rstrip('-')}-{digest}"


def head_name(cloud_name: str) -> str:
    return f"{cloud_name}-head"


def node_names(cloud_name: str, num_nodes: int) -> list[tuple[str, str]]:
    """(instance name, node kind) of every node, head first."""
    workers = [(f"{cloud_name}-worker-{i}", WORKER) for i in range(1, num_nodes)]
    return [(head_name(cloud_name), HEAD), *workers]


def network_tag(cloud_name: str) -> str:
    """The network tag on every instance of the cluster; its firewall rule targets it."""
    return f"orch-{cloud_name}"


def firewall_name(cloud_name: str) -> str:
    return f"orch-{cloud_name}-ports"


def label_filter(cloud_name: str, worker_only: bool = False) -> str:
    """A list filter on the cluster's labels (parenthesised expressions are ANDed)."""
    expr = f'(labels.{TAG_CLUSTER} = "{cloud_name}")'
    return f'{expr} (labels.{TAG_NODE_KIND} = "{WORKER}")' if worker_only else expr


def zone_in_region(zone: str, region: str) -> bool:
    """``us-central1-a`` is in ``us-central1``."""
    return zone.rsplit("-", 1)[0] == region


def last_segment(url: str) -> str:
    """``.../zones/us-central1-a`` → ``us-central1-a`` (Google links resources by URL)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def instance_body(
    config: ProvisionConfig, cloud_name: str, name: str, kind: str, zone: str,
    *, has_accelerators: bool, ssh_user: str,
) -> dict[str, Any]:
    """An Instance resource for ``instances.insert``."""
    assert config.instance_type is not None
    body: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{config.instance_type}",
        "labels": {**config.labels, TAG_CLUSTER: cloud_name, TAG_NODE_KIND: kind},
        "tags": {"items": [network_tag(cloud_name)]},
        "disks": [{
            "boot": True,
            "autoDelete": True,
            "type": "PERSISTENT",
            "initializeParams": {
                "diskSizeGb": str(config.disk_size),
                "sourceImage": config.image_id or DEFAULT_IMAGE,
                **gcp_disk(config.disk_tier, config.instance_type, zone),
            },
        }],
        "networkInterfaces": [{
            "network": DEFAULT_NETWORK,
            "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
        }],
    }
    if wants_best_network(config.network_tier):
        _best_network(body, config.cpus)
    if config.ssh_public_key:
        body["metadata"] = {
            "items": [{"key": "ssh-keys", "value": f"{ssh_user}:{config.ssh_public_key}"}]
        }
    scheduling: dict[str, Any] = {}
    if config.use_spot:
        scheduling = {
            "provisioningModel": "SPOT",
            "instanceTerminationAction": "STOP",
            "automaticRestart": False,
        }
    if config.use_spot or has_accelerators:
        scheduling["onHostMaintenance"] = "TERMINATE"  # GPUs and spot cannot live-migrate
    if scheduling:
        body["scheduling"] = scheduling
    return body


def _best_network(body: dict[str, Any], vcpus: float) -> None:
    """gVNIC, and Tier_1 egress where GCP offers it (types of 30+ vCPUs)."""
    body["networkInterfaces"][0]["nicType"] = "GVNIC"
    if vcpus >= TIER_1_MIN_VCPUS:
        body["networkPerformanceConfig"] = {"totalEgressBandwidthTier": "TIER_1"}


def firewall_body(cloud_name: str, ports: list[str]) -> dict[str, Any]:
    """A Firewall resource opening TCP ``ports`` ("8080", "10000-10010") to the cluster."""
    return {
        "name": firewall_name(cloud_name),
        "network": DEFAULT_NETWORK,
        "direction": "INGRESS",
        "sourceRanges": ["0.0.0.0/0"],
        "targetTags": [network_tag(cloud_name)],
        "allowed": [{"IPProtocol": "tcp", "ports": ports}],
        "description": f"orch: ports of cluster {cloud_name}",
    }


def firewall_ports(firewall: dict[str, Any]) -> list[str]:
    return [p for rule in firewall.get("allowed", []) for p in rule.get("ports", [])]


def status_of(instance: dict[str, Any]) -> InstanceStatus:
    return _STATUS[instance["status"]]


def is_head(instance: dict[str, Any]) -> bool:
    return instance.get("labels", {}).get(TAG_NODE_KIND) == HEAD


def node_order(instance: dict[str, Any]) -> tuple[int, int]:
    """Sort key: the head first, then workers by their index."""
    if is_head(instance):
        return (0, 0)
    index = instance["name"].rsplit("-", 1)[-1]
    return (1, int(index) if index.isdigit() else 0)


def node_info(
    instance: dict[str, Any], machine_type: dict[str, Any], ssh_user: str
) -> NodeInfo:
    interface = (instance.get("networkInterfaces") or [{}])[0]
    access = (interface.get("accessConfigs") or [{}])[0]
    return NodeInfo(
        instance_id=instance["name"],
        internal_ip=interface.get("networkIP", ""),
        external_ip=access.get("natIP"),
        is_head=is_head(instance),
        runner="ssh",
        ssh_user=ssh_user,
        cpus=float(machine_type.get("guestCpus", 0)),
        memory_gb=round(float(machine_type.get("memoryMb", 0)) / 1024, 1),
        gpus={
            a["guestAcceleratorType"]: int(a["guestAcceleratorCount"])
            for a in machine_type.get("accelerators", [])
        },
    )
