"""The names and ARM request bodies of the Azure resources a cluster is made of.

One resource group per cluster and region (``orch-<cluster>-<region>``) holds everything:
a network security group (SSH plus the cluster's ports), a virtual network with one
subnet behind that group, and per VM a public IP and a network interface, both deleted
with their VM (``deleteOption: Delete``), so removing a worker is one VM delete. Every name is
derived from the cluster name, so a retried call finds what an earlier attempt created
(ARM's PUT is create-or-update) instead of creating it twice.

Bodies are the SDK's typed models; they serialize to the documented REST payloads.
"""

from __future__ import annotations

from azure.mgmt.compute import models as compute
from azure.mgmt.network import models as network

from orch.clouds.base import TAG_CLUSTER, TAG_NODE_KIND, ProvisionConfig
from orch.clouds.errors import InvalidConfigError
from orch.clouds.tiers import azure_storage_account_type, wants_best_network

ADMIN_USER = "azureuser"
SUBNET = "default"
ADDRESS_SPACE = "10.0.0.0/16"
SSH_RULE = "orch-ssh"
PORT_RULE_PREFIX = "orch-port-"
SSH_PRIORITY = 1000
FIRST_PORT_PRIORITY = 1010
# Ubuntu 22.04 LTS, generation 2: runs on every current VM size, Ray supports it.
DEFAULT_IMAGE = "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest"


def resource_group_name(cluster_name: str, region: str) -> str:
    return f"orch-{cluster_name}-{region}"


def nsg_name(cluster_name: str) -> str:
    return f"{cluster_name}-nsg"


def vnet_name(cluster_name: str) -> str:
    return f"{cluster_name}-vnet"


def head_name(cluster_name: str) -> str:
    return f"{cluster_name}-head"


def vm_names(cluster_name: str, num_nodes: int) -> list[str]:
    """The head, then ``<cluster>-worker-<i>`` for i in 1..num_nodes-1."""
    return [head_name(cluster_name)] + [
        f"{cluster_name}-worker-{i}" for i in range(1, num_nodes)
    ]


def nic_name(vm_name: str) -> str:
    return f"{vm_name}-nic"


def public_ip_name(vm_name: str) -> str:
    return f"{vm_name}-ip"


def azure_zone(zone: str | None) -> str | None:
    """Azure names zones "1", "2", "3"; "<region>-2" (catalog style) is accepted too."""
    return zone.rsplit("-", 1)[-1] if zone else None


def image_reference(image_id: str | None) -> compute.ImageReference:
    """A marketplace URN (``publisher:offer:sku:version``; the default is Ubuntu 22.04) or
    an image resource id."""
    image_id = image_id or DEFAULT_IMAGE
    if image_id.startswith("/"):
        return compute.ImageReference(id=image_id)
    parts = image_id.split(":")
    if len(parts) != 4 or not all(parts):
        raise InvalidConfigError(
            f"Azure image {image_id!r}: expected publisher:offer:sku:version or an image "
            "resource id", code="InvalidImage")
    publisher, offer, sku, version = parts
    return compute.ImageReference(publisher=publisher, offer=offer, sku=sku, version=version)


def _inbound_rule(name: str, port: str, priority: int) -> network.SecurityRule:
    return network.SecurityRule(name=name, properties=network.SecurityRulePropertiesFormat(
        protocol="Tcp",
        access="Allow",
        direction="Inbound",
        priority=priority,
        source_address_prefix="*",
        source_port_range="*",
        destination_address_prefix="*",
        destination_port_range=port,
    ))


def _port_sort_key(port: str) -> int:
    return int(port.split("-")[0])


def nsg_body(region: str, cluster_name: str, ports: set[str]) -> network.NetworkSecurityGroup:
    """The cluster's security group: SSH, and one rule per port or range (``8000-8010``).
    The group is orch's own, so its rules are exactly these."""
    rules = [_inbound_rule(SSH_RULE, "22", SSH_PRIORITY)] + [
        _inbound_rule(f"{PORT_RULE_PREFIX}{port}", port, FIRST_PORT_PRIORITY + i)
        for i, port in enumerate(sorted(ports, key=_port_sort_key))
    ]
    return network.NetworkSecurityGroup(
        location=region, tags={TAG_CLUSTER: cluster_name},
        properties=network.NetworkSecurityGroupPropertiesFormat(security_rules=rules))


def vnet_body(region: str, cluster_name: str, nsg_id: str) -> network.VirtualNetwork:
    subnet = network.Subnet(name=SUBNET, properties=network.SubnetPropertiesFormat(
        address_prefix=ADDRESS_SPACE,
        network_security_group=network.NetworkSecurityGroup(id=nsg_id)))
    return network.VirtualNetwork(
        location=region, tags={TAG_CLUSTER: cluster_name},
        properties=network.VirtualNetworkPropertiesFormat(
            address_space=network.AddressSpace(address_prefixes=[ADDRESS_SPACE]),
            subnets=[subnet]))


def public_ip_body(region: str, cluster_name: str, zone: str | None) -> network.PublicIPAddress:
    return network.PublicIPAddress(
        location=region, tags={TAG_CLUSTER: cluster_name},
        sku=network.PublicIPAddressSku(name="Standard"),
        zones=[zone] if zone else None,
        properties=network.PublicIPAddressPropertiesFormat(
            public_ip_allocation_method="Static", delete_option="Delete"))


def accelerated_networking(config: ProvisionConfig) -> bool:
    """network_tier: best, on sizes that offer it (2+ vCPUs, as Azure documents)."""
    return wants_best_network(config.network_tier) and config.cpus >= 2


def nic_body(
    region: str, cluster_name: str, subnet_id: str, public_ip_id: str, *,
    accelerated: bool = False,
) -> network.NetworkInterface:
    ip_config = network.NetworkInterfaceIPConfiguration(
        name="primary",
        properties=network.NetworkInterfaceIPConfigurationPropertiesFormat(
            subnet=network.Subnet(id=subnet_id),
            private_ip_allocation_method="Dynamic",
            public_ip_address=network.PublicIPAddress(id=public_ip_id)))
    return network.NetworkInterface(
        location=region, tags={TAG_CLUSTER: cluster_name},
        properties=network.NetworkInterfacePropertiesFormat(
            ip_configurations=[ip_config], enable_accelerated_networking=accelerated or None))


def check_vm_config(config: ProvisionConfig) -> tuple[str, str, compute.ImageReference]:
    """The instance type, SSH public key and image a VM needs, or InvalidConfigError."""
    if not config.instance_type:
        raise InvalidConfigError("Azure VMs need an instance type", code="InvalidParameter")
    if not config.ssh_public_key:
        raise InvalidConfigError("Azure VMs need an SSH public key", code="InvalidParameter")
    return config.instance_type, config.ssh_public_key, image_reference(config.image_id)


def vm_body(config: ProvisionConfig, name: str, is_head: bool, nic_id: str
            ) -> compute.VirtualMachine:
    instance_type, ssh_public_key, image = check_vm_config(config)
    ssh_key = compute.SshPublicKey(path=f"/home/{ADMIN_USER}/.ssh/authorized_keys",
                                   key_data=ssh_public_key)
    properties = compute.VirtualMachineProperties(
        hardware_profile=compute.HardwareProfile(vm_size=instance_type),
        storage_profile=compute.StorageProfile(
            image_reference=image,
            os_disk=compute.OSDisk(
                create_option="FromImage",
                disk_size_gb=config.disk_size,
                delete_option="Delete",
                managed_disk=compute.ManagedDiskParameters(
                    storage_account_type=azure_storage_account_type(config.disk_tier,
                                                                    instance_type)))),
        os_profile=compute.OSProfile(
            computer_name=name,
            admin_username=ADMIN_USER,
            linux_configuration=compute.LinuxConfiguration(
                disable_password_authentication=True,
                ssh=compute.SshConfiguration(public_keys=[ssh_key]))),
        network_profile=compute.NetworkProfile(network_interfaces=[
            compute.NetworkInterfaceReference(
                id=nic_id, properties=compute.NetworkInterfaceReferenceProperties(
                    primary=True, delete_option="Delete"))
        ]),
    )
    if config.use_spot:
        # Evicted spot VMs are deallocated, not deleted, so a cluster can be resumed.
        properties.priority = "Spot"
        properties.eviction_policy = "Deallocate"
        properties.billing_profile = compute.BillingProfile(max_price=-1)
    zone = azure_zone(config.zone)
    return compute.VirtualMachine(
        location=config.region,
        tags={**config.labels, TAG_CLUSTER: config.cluster_name,
              TAG_NODE_KIND: "head" if is_head else "worker"},
        zones=[zone] if zone else None,
        properties=properties,
    )
