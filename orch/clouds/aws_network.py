"""A cluster's network pieces on EC2: default-VPC subnets, its security group, its key pair.

Every piece is found by name or tag, never remembered, so each function is safe to call
again after a crash. The security group (``orch-<cluster>``) lets the cluster's nodes talk
to each other on every port (Ray needs many) and opens SSH plus the task's ports to the
world. The key pair holds the public half of the user's SSH key; its name carries a hash
of that key, so a changed key is imported anew instead of silently reusing the old one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import ClientError

from orch.clouds.aws_errors import client_error_code
from orch.clouds.base import TAG_CLUSTER
from orch.clouds.errors import BlockScope, InvalidConfigError, TransientError

SSH_PORT = 22
_WORLD = "0.0.0.0/0"


def resource_name(cluster_name: str) -> str:
    return f"orch-{cluster_name}"


def _cluster_tags(resource_type: str, cluster_name: str) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type,
             "Tags": [{"Key": TAG_CLUSTER, "Value": cluster_name}]}]


def default_vpc_id(ec2: Any) -> str:
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise InvalidConfigError(
            f"{ec2.meta.region_name} has no default VPC", code="VPCIdNotSpecified",
            scope=BlockScope.REGION)
    vpc_id: str = vpcs[0]["VpcId"]
    return vpc_id


def interfaces(group_id: str, *, efa: bool) -> dict[str, Any]:
    """RunInstances' networking: the security group alone, or (network_tier: best on a
    type with EFA) one EFA interface holding it; an EFA interface must name its subnet and
    ask for a public address itself."""
    if not efa:
        return {"SecurityGroupIds": [group_id]}
    return {"NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa",
                                   "Groups": [group_id], "DeleteOnTermination": True,
                                   "AssociatePublicIpAddress": True}]}


def has_subnet(request: dict[str, Any]) -> bool:
    nics = request.get("NetworkInterfaces")
    return "SubnetId" in (nics[0] if nics else request)


def place_in_subnet(request: dict[str, Any], subnet_id: str) -> None:
    """Sets the subnet where RunInstances wants it: on the interface when there is one."""
    nics = request.get("NetworkInterfaces")
    (nics[0] if nics else request)["SubnetId"] = subnet_id


def default_subnet_id(ec2: Any, zone: str) -> str:
    """The default VPC's subnet in ``zone`` (EC2 creates one per zone)."""
    subnets = ec2.describe_subnets(Filters=[
        {"Name": "availability-zone", "Values": [zone]},
        {"Name": "default-for-az", "Values": ["true"]},
    ])["Subnets"]
    if not subnets:
        raise InvalidConfigError(f"no default subnet in zone {zone}", scope=BlockScope.ZONE)
    subnet_id: str = subnets[0]["SubnetId"]
    return subnet_id


def parse_ports(ports: list[str]) -> list[tuple[int, int]]:
    """``["8080", "9000-9010"]`` → ``[(8080, 8080), (9000, 9010)]``."""
    ranges = []
    for port in ports:
        low, _, high = port.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise InvalidConfigError(f"not a port or a port range: {port!r}") from None
        if not 1 <= first <= last <= 65535:
            raise InvalidConfigError(f"not a valid port range: {port!r}")
        ranges.append((first, last))
    return ranges


def find_security_group(ec2: Any, cluster_name: str) -> dict[str, Any] | None:
    groups = ec2.describe_security_groups(Filters=[
        {"Name": "group-name", "Values": [resource_name(cluster_name)]},
        {"Name": "tag:" + TAG_CLUSTER, "Values": [cluster_name]},
    ])["SecurityGroups"]
    return groups[0] if groups else None


def ensure_security_group(ec2: Any, cluster_name: str, ports: list[str]) -> str:
    """The cluster's security group id, created if missing, with SSH and ``ports`` open."""
    group = find_security_group(ec2, cluster_name)
    if group is None:
        group = _create_security_group(ec2, cluster_name)
    group_id: str = group["GroupId"]
    # Every rule is (re)applied: a crash may have come between creating and authorizing.
    _authorize(ec2, group_id, {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]})
    open_ports(ec2, group_id, [str(SSH_PORT), *ports])
    return group_id


def _create_security_group(ec2: Any, cluster_name: str) -> dict[str, Any]:
    name = resource_name(cluster_name)
    try:
        return {"GroupId": ec2.create_security_group(
            GroupName=name, Description=f"orch cluster {cluster_name}",
            VpcId=default_vpc_id(ec2),
            TagSpecifications=_cluster_tags("security-group", cluster_name),
        )["GroupId"]}
    except ClientError as exc:
        if client_error_code(exc) != "InvalidGroup.Duplicate":
            raise
    # A concurrent attempt made it between our lookup and our create, or someone else owns
    # a group of that name (then it lacks our tag and is not ours to use).
    group = find_security_group(ec2, cluster_name)
    if group is None:
        raise InvalidConfigError(f"a security group named {name} exists that orch did not make",
                                 code="InvalidGroup.Duplicate", scope=BlockScope.REGION)
    return group


def open_ports(ec2: Any, group_id: str, ports: list[str]) -> None:
    for first, last in parse_ports(ports):
        _authorize(ec2, group_id, {"IpProtocol": "tcp", "FromPort": first, "ToPort": last,
                                   "IpRanges": [{"CidrIp": _WORLD}]})


def _authorize(ec2: Any, group_id: str, permission: dict[str, Any]) -> None:
    try:
        ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[permission])
    except ClientError as exc:
        if client_error_code(exc) != "InvalidPermission.Duplicate":
            raise


def delete_security_group_if_unused(ec2: Any, cluster_name: str) -> None:
    """Delete the cluster's group unless an instance still uses it.

    A stopped cluster keeps its group (its instances will run again). Instances still
    shutting down hold it for a little while longer: that is worth a retry.
    """
    group = find_security_group(ec2, cluster_name)
    if group is None:
        return
    users = [
        instance
        for reservation in ec2.describe_instances(Filters=[
            {"Name": "instance.group-id", "Values": [group["GroupId"]]},
        ])["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] != "terminated"
    ]
    if any(i["State"]["Name"] != "shutting-down" for i in users):
        return
    if users:
        raise TransientError(
            f"security group {group['GroupId']} is still held by instances shutting down",
            code="DependencyViolation")
    try:
        ec2.delete_security_group(GroupId=group["GroupId"])
    except ClientError as exc:
        if client_error_code(exc) != "InvalidGroup.NotFound":
            raise


def key_pair_name(cluster_name: str, public_key: str) -> str:
    digest = hashlib.sha256(public_key.strip().encode()).hexdigest()[:12]
    return f"{resource_name(cluster_name)}-{digest}"


def ensure_key_pair(ec2: Any, cluster_name: str, public_key: str) -> str:
    """Import ``public_key`` as the cluster's key pair (once); returns its name."""
    name = key_pair_name(cluster_name, public_key)
    try:
        ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public_key.strip().encode(),
                            TagSpecifications=_cluster_tags("key-pair", cluster_name))
    except ClientError as exc:
        if client_error_code(exc) != "InvalidKeyPair.Duplicate":
            raise
    return name


def delete_key_pairs(ec2: Any, cluster_name: str) -> None:
    pairs = ec2.describe_key_pairs(
        Filters=[{"Name": "tag:" + TAG_CLUSTER, "Values": [cluster_name]}])["KeyPairs"]
    for pair in pairs:
        ec2.delete_key_pair(KeyName=pair["KeyName"])
