"""The Azure provider: VMs in a resource group per cluster and region, through the Azure SDK.

Credentials come from :mod:`orch.clouds.azure_identity` (a service principal in the
environment, workload identity, managed identity when the config's ``cloud_identity`` is
on, the ``az`` CLI login) unless a ``TokenCredential`` is passed in; the
subscription from ``AZURE_SUBSCRIPTION_ID``. ``ORCH_AZURE_ENDPOINT`` replaces the Resource
Manager endpoint (a sovereign cloud, or a fake in tests); the token is then requested for
that endpoint's audience.

Every write is ARM's create-or-update on a name derived from the cluster
(:mod:`orch.clouds.azure_resources`), so a retried call finds what an earlier attempt made
and the idempotency token is not needed. Long-running operations are started for all VMs
first and then waited on together (the SDK's pollers run in threads), so N VMs take about
as long as one.

The SDK's own retry loop is off (``retry_total=0``): a throttled or failed call becomes a
:class:`TransientError` at once, and the caller (a Temporal activity) retries with its
durable backoff instead of the SDK sleeping for minutes inside one attempt.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import cached_property, partial
from typing import Any, TypeVar

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, ClientAuthenticationError, ResourceNotFoundError
from azure.core.polling import LROPoller
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.models import NetworkSecurityGroup
from azure.mgmt.resource.resources import ResourceManagementClient
from azure.mgmt.resource.resources.models import ResourceGroup

from orch.clouds import azure_resources as res
from orch.clouds.azure_errors import classify, is_absent, translated
from orch.clouds.azure_identity import IdentityChain, identity_chain
from orch.clouds.base import (
    TAG_CLUSTER,
    TAG_NODE_KIND,
    ClusterInfo,
    InstanceStatus,
    NodeInfo,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    ProvisionError,
    QuotaError,
    TransientError,
)
from orch.settings import load_settings

ENDPOINT_ENV = "ORCH_AZURE_ENDPOINT"
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
DEFAULT_POLLING_INTERVAL = 5.0  # seconds between polls when ARM sends no Retry-After
REQUIRED_PROVIDERS = ("Microsoft.Compute", "Microsoft.Network")
T = TypeVar("T")

_POWER_STATES = {
    "starting": InstanceStatus.PENDING,
    "running": InstanceStatus.RUNNING,
    "stopping": InstanceStatus.STOPPING,
    "deallocating": InstanceStatus.STOPPING,
    "stopped": InstanceStatus.STOPPED,
    "deallocated": InstanceStatus.STOPPED,
}


def _statuses(vm: VirtualMachine) -> list[tuple[str, str]]:
    """(code, message) of the VM's instance-view statuses (listed with instanceView)."""
    view = vm.properties.instance_view if vm.properties else None
    return [(s.code or "", s.message or "") for s in (view.statuses if view else None) or []]


def _vm_status(vm: VirtualMachine) -> InstanceStatus:
    """A VM's state from its provisioning state and ``PowerState/...`` status; a VM that
    is still being created has no power state yet (PENDING)."""
    if vm.properties and vm.properties.provisioning_state == "Deleting":
        return InstanceStatus.TERMINATING
    for code, _ in _statuses(vm):
        if code.startswith("PowerState/"):
            return _POWER_STATES.get(code.removeprefix("PowerState/"), InstanceStatus.PENDING)
    return InstanceStatus.PENDING


def _vm_failure(vm: VirtualMachine) -> tuple[str, str] | None:
    """The error code and message of a VM whose last operation failed."""
    if not vm.properties or vm.properties.provisioning_state != "Failed":
        return None
    for code, message in _statuses(vm):
        if code.startswith("ProvisioningState/failed/"):
            return code.removeprefix("ProvisioningState/failed/"), message
    return "ProvisioningFailed", f"{vm.name} is in provisioning state Failed"


def _is_head(vm: VirtualMachine) -> bool:
    return (vm.tags or {}).get(TAG_NODE_KIND) == "head"


def _node_order(vm: VirtualMachine) -> tuple[int, int, str]:
    """Head first, then workers by their index (worker-2 before worker-10)."""
    name = vm.name or ""
    index = name.rsplit("-", 1)[-1]
    return (0 if _is_head(vm) else 1, int(index) if index.isdigit() else 0, name)


def _zone(vm: VirtualMachine) -> str | None:
    return vm.zones[0] if vm.zones else None


def _nic_id(vm: VirtualMachine) -> str:
    """The (lower-case) id of the VM's primary network interface."""
    profile = vm.properties.network_profile if vm.properties else None
    refs = (profile.network_interfaces if profile else None) or []
    return (refs[0].id or "").lower() if refs else ""


def _run_all(starts: Iterable[Callable[[], LROPoller[T]]]) -> list[T]:
    """Start every long-running operation (one refused does not stop the others), wait
    for all of them so none is left running, then raise the first error."""
    errors: list[AzureError] = []
    pollers = []
    for start in starts:
        try:
            pollers.append(start())
        except AzureError as err:
            errors.append(err)
    results = []
    for poller in pollers:
        try:
            results.append(poller.result())
        except AzureError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    return results


class AzureProvider:
    name = "azure"

    def __init__(
        self,
        credential: TokenCredential | None = None,
        subscription_id: str | None = None,
        endpoint: str | None = None,
        polling_interval: float = DEFAULT_POLLING_INTERVAL,
    ):
        self.subscription_id = subscription_id or os.environ.get(SUBSCRIPTION_ENV, "")
        self.endpoint = endpoint or os.environ.get(ENDPOINT_ENV) or None
        self.polling_interval = polling_interval
        self._given_credential = credential

    # ---- clients ----------------------------------------------------------------------

    @cached_property
    def _credential(self) -> TokenCredential:
        return self._given_credential or identity_chain(load_settings().cloud_identity)

    def _client_kwargs(self) -> dict[str, Any]:
        """What the three management clients are built with."""
        if not self.subscription_id:
            raise AuthError(f"Azure: {SUBSCRIPTION_ENV} is not set", code="SubscriptionNotSet")
        kwargs: dict[str, Any] = {
            "credential": self._credential,
            "subscription_id": self.subscription_id,
            "polling_interval": self.polling_interval,
            "retry_total": 0,
        }
        if self.endpoint:
            kwargs["base_url"] = self.endpoint
            kwargs["credential_scopes"] = [self.endpoint.rstrip("/") + "/.default"]
        return kwargs

    @cached_property
    def _compute(self) -> ComputeManagementClient:
        return ComputeManagementClient(**self._client_kwargs())

    @cached_property
    def _network(self) -> NetworkManagementClient:
        return NetworkManagementClient(**self._client_kwargs())

    @cached_property
    def _resources(self) -> ResourceManagementClient:
        return ResourceManagementClient(**self._client_kwargs())

    # ---- reads ------------------------------------------------------------------------

    def _cluster_vms(self, region: str, cluster_name: str) -> list[VirtualMachine]:
        """The cluster's VMs with their instance view, head first; none if its resource
        group does not exist."""
        group = res.resource_group_name(cluster_name, region)
        try:
            vms = list(self._compute.virtual_machines.list(group, expand="instanceView"))
        except ResourceNotFoundError as err:
            if not is_absent(err):
                raise
            return []
        return sorted((vm for vm in vms if (vm.tags or {}).get(TAG_CLUSTER) == cluster_name),
                      key=_node_order)

    def _vm_size(self, region: str, instance_type: str) -> tuple[str, int] | None:
        """(quota family, vCPUs) of a VM size in a region, from the resource-SKU list."""
        skus = self._compute.resource_skus.list(filter=f"location eq '{region}'")
        for sku in skus:
            if sku.resource_type == "virtualMachines" and (
                (sku.name or "").lower() == instance_type.lower()
            ):
                vcpus = next((c.value for c in sku.capabilities or [] if c.name == "vCPUs"), None)
                if sku.family and vcpus:
                    return sku.family, int(vcpus)
        return None

    # ---- Provider ---------------------------------------------------------------------

    def check_quota(self, config: ProvisionConfig) -> None:
        """Compare the vCPUs still to be created with the family and regional quotas (or
        the low-priority quota for spot) from ``usage.list``. VMs the cluster already has
        count in the usage already (Azure counts deallocated VMs too), so only the
        shortfall is needed."""
        if not config.instance_type:
            return
        zone = res.azure_zone(config.zone)
        with translated(config.region, zone):
            size = self._vm_size(config.region, config.instance_type)
            if size is None:  # unknown here: the create call will say why
                return
            family, vcpus = size
            wanted = set(res.vm_names(config.cluster_name, config.num_nodes))
            existing = {vm.name for vm in self._cluster_vms(config.region, config.cluster_name)}
            needed = len(wanted - existing) * vcpus
            if needed == 0:
                return
            quotas = ["lowPriorityCores"] if config.use_spot else [family, "cores"]
            for usage in self._compute.usage.list(config.region):
                if usage.name.value in quotas and usage.current_value + needed > usage.limit:
                    raise QuotaError(
                        f"Azure {config.region}: {usage.name.localized_value or usage.name.value}"
                        f" quota: {usage.current_value} of {usage.limit} in use, "
                        f"{config.instance_type} needs {needed} more vCPUs",
                        code="QuotaExceeded")

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        """Resume the cluster's deallocated VMs, then create the missing ones (and their
        network) with all their operations in flight at once. A VM whose creation failed
        earlier is created again. Raises on the first failure; what was made stays, for the
        caller to terminate."""
        zone = res.azure_zone(config.zone)
        group = res.resource_group_name(config.cluster_name, config.region)
        with translated(config.region, zone):
            existing = {vm.name: vm for vm in self._cluster_vms(config.region,
                                                                 config.cluster_name)}
            wanted = res.vm_names(config.cluster_name, config.num_nodes)
            status = {name: _vm_status(existing[name]) for name in wanted if name in existing}
            stopping = [n for n, s in status.items() if s == InstanceStatus.STOPPING]
            if stopping:
                raise TransientError(f"Azure: {', '.join(stopping)} still stopping; retry",
                                     code="VMStopping")
            # A deallocated VM is started (also after a failed start); one whose creation
            # failed is created again.
            stopped = [n for n, s in status.items() if s == InstanceStatus.STOPPED]
            if stopped and not config.resume_stopped:
                raise ProvisionError(f"Azure: {', '.join(stopped)} stopped and resuming is off",
                                     code="StoppedNodesExist", scope=BlockScope.REGION)
            missing = [n for n in wanted if n not in status or (
                _vm_failure(existing[n]) and n not in stopped)]
            if missing:
                res.check_vm_config(config)  # before anything is created
            vms = self._compute.virtual_machines
            _run_all(partial(vms.begin_start, group, name) for name in stopped)
            if missing:
                self._create_vms(config, group, missing)
        return ProvisionRecord(
            cloud=self.name,
            cluster_name=config.cluster_name,
            region=config.region,
            zone=zone,
            head_instance_id=wanted[0],
            created_instance_ids=missing,
            resumed_instance_ids=stopped,
        )

    def _create_vms(self, config: ProvisionConfig, group: str, names: list[str]) -> None:
        region, cluster, zone = config.region, config.cluster_name, res.azure_zone(config.zone)
        self._resources.resource_groups.create_or_update(
            group, ResourceGroup(location=region, tags={TAG_CLUSTER: cluster}))
        nsg = self._ensure_ports(group, region, cluster, set(config.ports))
        vnet = self._network.virtual_networks.begin_create_or_update(
            group, res.vnet_name(cluster), res.vnet_body(region, cluster, nsg.id or "")).result()
        subnet_id = vnet.properties.subnets[0].id if vnet.properties and (
            vnet.properties.subnets) else None
        ips = _run_all(partial(
            self._network.public_ip_addresses.begin_create_or_update, group,
            res.public_ip_name(name), res.public_ip_body(region, cluster, zone))
            for name in names)
        nics = _run_all(partial(
            self._network.network_interfaces.begin_create_or_update, group, res.nic_name(name),
            res.nic_body(region, cluster, subnet_id or "", ip.id or "",
                         accelerated=res.accelerated_networking(config)))
            for name, ip in zip(names, ips, strict=True))
        _run_all(partial(
            self._compute.virtual_machines.begin_create_or_update, group, name,
            res.vm_body(config, name, name == res.head_name(cluster), nic.id or ""))
            for name, nic in zip(names, nics, strict=True))

    def _ensure_ports(self, group: str, region: str, cluster_name: str, ports: set[str]
                      ) -> NetworkSecurityGroup:
        """The cluster's security group with at least ``ports`` open (created if missing)."""
        name = res.nsg_name(cluster_name)
        try:
            nsg = self._network.network_security_groups.get(group, name)
        except ResourceNotFoundError as err:
            if not is_absent(err):
                raise
            opened: set[str] = set()
        else:
            opened = self._open_ports(nsg)
            if ports <= opened:
                return nsg
        return self._network.network_security_groups.begin_create_or_update(
            group, name, res.nsg_body(region, cluster_name, opened | ports)).result()

    @staticmethod
    def _open_ports(nsg: NetworkSecurityGroup) -> set[str]:
        rules = (nsg.properties.security_rules if nsg.properties else None) or []
        return {rule.properties.destination_port_range or "" for rule in rules
                if (rule.name or "").startswith(res.PORT_RULE_PREFIX) and rule.properties}

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        """A VM whose operation failed raises its translated error; one settled in the
        other state (RUNNING vs STOPPED) raises at once."""
        with translated(region):
            vms = self._cluster_vms(region, cluster_name)
            if not vms:
                raise ProvisionError(f"Azure {region}: cluster {cluster_name} has no VMs",
                                     code="ClusterNotFound", scope=BlockScope.REGION)
            for vm in vms:
                failure = _vm_failure(vm)
                if failure:
                    raise classify(*failure, status=None, region=region, zone=_zone(vm))
            statuses = {vm.name: _vm_status(vm) for vm in vms}
            settled = {InstanceStatus.RUNNING, InstanceStatus.STOPPED} - {state}
            wrong = [f"{n} is {s}" for n, s in statuses.items() if s in settled]
            if wrong:
                raise ProvisionError(f"Azure {region}: waiting for {state}, but "
                                     f"{', '.join(wrong)}", code="UnexpectedState",
                                     scope=BlockScope.REGION)
        return StateCheck(done=all(status == state for status in statuses.values()),
                          seen=", ".join(f"{n}={s}" for n, s in sorted(statuses.items())))

    def query_instances(self, region: str, cluster_name: str) -> dict[str, InstanceStatus]:
        with translated(region):
            return {vm.name or "": _vm_status(vm)
                    for vm in self._cluster_vms(region, cluster_name)}

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            vms = [vm for vm in self._cluster_vms(region, cluster_name)
                   if _vm_status(vm) != InstanceStatus.TERMINATING]
            if not vms:
                return ClusterInfo(cloud=self.name, region=region)
            nics = {(nic.id or "").lower(): nic
                    for nic in self._network.network_interfaces.list(group)}
            ips = {(ip.id or "").lower(): ip.properties.ip_address if ip.properties else None
                   for ip in self._network.public_ip_addresses.list(group)}
        nodes = []
        for vm in vms:
            nic = nics.get(_nic_id(vm))
            configs = (nic.properties.ip_configurations if nic and nic.properties else None)
            ip_config = configs[0].properties if configs else None
            public = ip_config.public_ip_address if ip_config else None
            nodes.append(NodeInfo(
                instance_id=vm.name or "",
                internal_ip=(ip_config.private_ip_address if ip_config else None) or "",
                external_ip=ips.get((public.id or "").lower()) if public else None,
                is_head=_is_head(vm),
                ssh_user=res.ADMIN_USER,
            ))
        head = vms[0]
        size = head.properties.hardware_profile if head.properties else None
        return ClusterInfo(cloud=self.name, region=region, zone=_zone(head),
                           instance_type=size.vm_size if size else None, nodes=nodes)

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False) -> None:
        """Deallocate (compute billing stops; disks and IPs stay) and wait."""
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            vms = [vm for vm in self._cluster_vms(region, cluster_name)
                   if not (worker_only and _is_head(vm))]
            _run_all(partial(self._compute.virtual_machines.begin_deallocate, group, vm.name or "")
                     for vm in vms
                     if _vm_status(vm) in (InstanceStatus.PENDING, InstanceStatus.RUNNING))

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> None:
        """The whole cluster: delete its resource group (everything in it goes, disks
        included) and wait. Workers only: delete their VMs, then their NICs and IPs."""
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            if not worker_only:
                try:
                    self._resources.resource_groups.begin_delete(group).result()
                except ResourceNotFoundError as err:
                    if not is_absent(err):  # else: already gone, or never created
                        raise
                return
            workers = [vm.name or "" for vm in self._cluster_vms(region, cluster_name)
                       if not _is_head(vm)]
            _run_all(partial(self._compute.virtual_machines.begin_delete, group, name)
                     for name in workers)
            _run_all(partial(self._network.network_interfaces.begin_delete, group,
                             res.nic_name(name)) for name in workers)
            _run_all(partial(self._network.public_ip_addresses.begin_delete, group,
                             res.public_ip_name(name)) for name in workers)

    def open_ports(self, region: str, cluster_name: str, ports: list[str]) -> None:
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            self._ensure_ports(group, region, cluster_name, set(ports))

    def cleanup_ports(self, region: str, cluster_name: str) -> None:
        """Close every port but SSH; nothing to do when the cluster's group is gone."""
        group = res.resource_group_name(cluster_name, region)
        name = res.nsg_name(cluster_name)
        with translated(region):
            try:
                nsg = self._network.network_security_groups.get(group, name)
            except ResourceNotFoundError as err:
                if not is_absent(err):
                    raise
                return
            if self._open_ports(nsg):
                self._network.network_security_groups.begin_create_or_update(
                    group, name, res.nsg_body(region, cluster_name, set())).result()

    def credentials_ok(self) -> tuple[bool, str]:
        """Whether a token is granted and the subscription can use Compute and Network."""
        try:
            for namespace in REQUIRED_PROVIDERS:
                provider = self._resources.providers.get(namespace)
                if provider.registration_state != "Registered":
                    return False, (f"{namespace} is not registered in subscription "
                                   f"{self.subscription_id} (az provider register -n "
                                   f"{namespace})")
        except AuthError as err:
            return False, err.message
        except ClientAuthenticationError as err:
            return False, f"credentials rejected: {err.message}"
        except AzureError as err:
            return False, f"{type(err).__name__}: {err.message}"
        chain = self._credential
        source = f" ({chain.source})" if isinstance(chain, IdentityChain) else ""
        return True, f"subscription {self.subscription_id}{source}"
