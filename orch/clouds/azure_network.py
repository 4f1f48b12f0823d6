"""The network a cluster's Azure VMs need, made without waiting on it.

In the cluster's resource group: a network security group (SSH and the cluster's ports),
a virtual network whose subnet sits behind that group, and per VM a public IP and a
network interface. ARM refuses a resource that names another one still being made
(``ReferencedResourceNotProvisioned``), so they are made in layers: the security group
and the IPs, then the virtual network, then the interfaces, then (the caller) the VMs.
:meth:`ClusterNetwork.prepare` is one step: it looks at every layer, starts what the
first unfinished one lacks (a create-or-update whose long-running operation it does not
poll) and says what is still being made; the caller's waiter calls it again until
nothing is. A resource whose last operation failed is simply made again, as ARM advises.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.models import NetworkSecurityGroup

from orch.clouds import azure_resources as res
from orch.clouds.azure_errors import is_absent

SUCCEEDED = "Succeeded"
FAILED = "Failed"


def provisioning_state(resource: Any) -> str:
    """A resource's ``properties.provisioningState`` (Succeeded, Updating, Failed...)."""
    properties = getattr(resource, "properties", None)
    return (getattr(properties, "provisioning_state", None) or "") if properties else ""


def open_ports(nsg: NetworkSecurityGroup) -> set[str]:
    """The ports (or ranges) the cluster's security group opens besides SSH."""
    rules = (nsg.properties.security_rules if nsg.properties else None) or []
    return {rule.properties.destination_port_range or "" for rule in rules
            if (rule.name or "").startswith(res.PORT_RULE_PREFIX) and rule.properties}


def _unsettled(resources: list[Any]) -> str:
    """What is still being made among ``resources``, e.g. ``c1-head-ip Updating``."""
    return ", ".join(f"{r.name} {provisioning_state(r) or 'Creating'}" for r in resources
                     if provisioning_state(r) != SUCCEEDED)


class ClusterNetwork:
    """The network resources of one cluster in one region (its resource group)."""

    def __init__(self, network: NetworkManagementClient, group: str, region: str,
                 cluster_name: str) -> None:
        self.network, self.group, self.region, self.cluster = network, group, region, cluster_name

    def _get(self, read: Callable[..., Any], name: str) -> Any:
        """The resource, or None when it (or its group) is not there."""
        try:
            return read(self.group, name)
        except ResourceNotFoundError as err:
            if not is_absent(err):
                raise
            return None

    def _made(self, start: Callable[..., Any], name: str, body: Any) -> Any:
        """Start a create-or-update and return the resource as ARM accepted it (its
        provisioning state says whether it is done), without polling the operation."""
        return start(self.group, name, body, polling=False).result()

    def security_group(self, ports: set[str]) -> tuple[NetworkSecurityGroup, bool]:
        """The cluster's security group with at least ``ports`` open, and whether an
        update of it was started just now."""
        name = res.nsg_name(self.cluster)
        nsg = self._get(self.network.network_security_groups.get, name)
        usable = nsg is not None and provisioning_state(nsg) != FAILED
        opened = open_ports(nsg) if usable else set()
        if usable and ports <= opened:
            return nsg, False
        body = res.nsg_body(self.region, self.cluster, opened | ports)
        return self._made(self.network.network_security_groups.begin_create_or_update,
                          name, body), True

    def close_ports(self) -> bool:
        """Close every port but SSH; whether an update was started (none: nothing open,
        or no group any more)."""
        nsg = self._get(self.network.network_security_groups.get, res.nsg_name(self.cluster))
        if nsg is None or not open_ports(nsg):
            return False
        self._made(self.network.network_security_groups.begin_create_or_update,
                   res.nsg_name(self.cluster), res.nsg_body(self.region, self.cluster, set()))
        return True

    def prepare(self, vm_names: list[str], ports: set[str], zone: str | None,
                accelerated: bool) -> tuple[str, dict[str, str]]:
        """One step towards the network of ``vm_names``: what is still being made ("" once
        nothing is) and then each VM's network interface id."""
        nsg, _ = self.security_group(ports)
        ip_body = partial(res.public_ip_body, self.region, self.cluster, zone)
        ips = self._ensure(self.network.public_ip_addresses,
                           {res.public_ip_name(vm): ip_body for vm in vm_names})
        waiting = _unsettled([nsg, *ips.values()])
        if waiting:
            return waiting, {}
        vnet_name = res.vnet_name(self.cluster)
        vnets = self._ensure(self.network.virtual_networks, {vnet_name: partial(
            res.vnet_body, self.region, self.cluster, nsg.id or "")})
        waiting = _unsettled(list(vnets.values()))
        if waiting:
            return waiting, {}
        properties = vnets[vnet_name].properties
        subnet_id = (properties.subnets[0].id if properties and properties.subnets else "") or ""
        nics = self._ensure(self.network.network_interfaces, {res.nic_name(vm): partial(
            res.nic_body, self.region, self.cluster, subnet_id,
            ips[res.public_ip_name(vm)].id or "", accelerated=accelerated) for vm in vm_names})
        waiting = _unsettled(list(nics.values()))
        if waiting:
            return waiting, {}
        return "", {vm: nics[res.nic_name(vm)].id or "" for vm in vm_names}

    def _ensure(self, operations: Any, wanted: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Each wanted resource (by name: how to build its body) as it is now; the missing
        and the failed ones started anew."""
        existing = {r.name: r for r in operations.list(self.group)}
        found = {}
        for name, body in wanted.items():
            resource = existing.get(name)
            if resource is None or provisioning_state(resource) == FAILED:
                resource = self._made(operations.begin_create_or_update, name, body())
            found[name] = resource
        return found
