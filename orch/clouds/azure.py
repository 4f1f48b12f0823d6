"""The Azure provider: VMs in a resource group per cluster and region, through the Azure SDK.

Credentials come from :mod:`orch.clouds.azure_identity` (a service principal in the
environment, workload identity, managed identity when the config's ``cloud_identity`` is
on, the ``az`` CLI login) unless a ``TokenCredential`` is passed in; the
subscription from ``AZURE_SUBSCRIPTION_ID``. ``ORCH_AZURE_ENDPOINT`` replaces the Resource
Manager endpoint (a sovereign cloud, or a fake in tests); the token is then requested for
that endpoint's audience.

Every write is ARM's create-or-update on a name derived from the cluster
(:mod:`orch.clouds.azure_resources`), so a retried call finds what an earlier attempt made
and the idempotency token is not needed.

No call waits for a long-running operation: each is started (``polling=False``: ARM has
accepted it) for all VMs at once and handed back as an :class:`Operation` naming the
resource it acts on, and :meth:`AzureProvider.check_operations` follows it through that
resource's own provisioning state, where ARM also keeps a failure: a VM whose create,
start or deallocate failed is ``Failed`` with ``ProvisioningState/failed/<code>`` in its
instance view (AllocationFailed, SkuNotAvailable...). A resource group's delete keeps
its failure in ARM's record of the operation only, which it follows by its address
(:mod:`orch.clouds.azure_groups`). The network a VM needs is made in layers, one step per
``run_instances`` call (:mod:`orch.clouds.azure_network`); a call that finds it
unfinished, or VMs still deallocating, returns ``waiting_for`` and is called again.

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
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.resource.resources import ResourceManagementClient
from azure.mgmt.resource.resources.models import ResourceGroup

from orch.clouds import azure_resources as res
from orch.clouds.azure_errors import classify, is_absent, translated
from orch.clouds.azure_groups import DELETE_GROUP, delete_state, start_delete
from orch.clouds.azure_identity import IdentityChain, identity_chain
from orch.clouds.azure_network import ClusterNetwork, provisioning_state
from orch.clouds.azure_vms import is_head, nic_id, node_order, vm_failure, vm_status, vm_zone
from orch.clouds.base import (
    TAG_CLUSTER,
    ClusterInfo,
    InstanceStatus,
    NodeInfo,
    Operation,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import (
    AuthError,
    BlockScope,
    ProvisionError,
    QuotaError,
)
from orch.settings import load_settings

ENDPOINT_ENV = "ORCH_AZURE_ENDPOINT"
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
REQUIRED_PROVIDERS = ("Microsoft.Compute", "Microsoft.Network")
T = TypeVar("T")

# What an Operation does, and what it names: a VM (create, start, deallocate, delete), the
# security group (an update); the resource group's delete is azure_groups'.
CREATE, START, DEALLOCATE, DELETE = "create", "start", "deallocate", "delete"
VM_OPERATIONS = frozenset({CREATE, START, DEALLOCATE, DELETE})
UPDATE = "update"
_IN_PROGRESS = frozenset({"Creating", "Updating", "Deleting", "Accepted"})

def _start_all(starts: Iterable[Callable[[], Any]]) -> None:
    """Start every long-running operation (one refused does not stop the others), then
    raise the first refusal."""
    errors: list[AzureError] = []
    for start in starts:
        try:
            start()
        except AzureError as err:
            errors.append(err)
    if errors:
        raise errors[0]


class AzureProvider:
    name = "azure"

    def __init__(
        self,
        credential: TokenCredential | None = None,
        subscription_id: str | None = None,
        endpoint: str | None = None,
    ):
        self.subscription_id = subscription_id or os.environ.get(SUBSCRIPTION_ENV, "")
        self.endpoint = endpoint or os.environ.get(ENDPOINT_ENV) or None
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
                      key=node_order)

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
        """Start the cluster's deallocated VMs, then (once their network is made) create
        the missing ones, every operation in flight at once; returns them. A VM whose
        creation failed earlier is created again. Raises on the first refusal; what was
        made stays, for the caller to terminate."""
        zone = res.azure_zone(config.zone)
        group = res.resource_group_name(config.cluster_name, config.region)
        wanted = res.vm_names(config.cluster_name, config.num_nodes)
        record = ProvisionRecord(cloud=self.name, cluster_name=config.cluster_name,
                                 region=config.region, zone=zone, head_instance_id=wanted[0])
        with translated(config.region, zone):
            existing = {vm.name: vm for vm in self._cluster_vms(config.region,
                                                                 config.cluster_name)}
            status = {name: vm_status(existing[name]) for name in wanted if name in existing}
            stopping = [n for n, s in status.items() if s == InstanceStatus.STOPPING]
            if stopping:
                return record.model_copy(update={"waiting_for": ", ".join(
                    f"{name} deallocating" for name in stopping)})
            # A deallocated VM is started (also after a failed start); one whose creation
            # failed is created again.
            stopped = [n for n, s in status.items() if s == InstanceStatus.STOPPED]
            if stopped and not config.resume_stopped:
                raise ProvisionError(f"Azure: {', '.join(stopped)} stopped and resuming is off",
                                     code="StoppedNodesExist", scope=BlockScope.REGION)
            missing = [n for n in wanted if n not in status or (
                vm_failure(existing[n]) and n not in stopped)]
            if missing:
                res.check_vm_config(config)  # before anything is created
            vms = self._compute.virtual_machines
            _start_all(partial(vms.begin_start, group, name, polling=False) for name in stopped)
            operations = [Operation(kind=START, name=name) for name in stopped]
            waiting_for = self._create_vms(config, group, missing) if missing else ""
        if not waiting_for:
            operations += [Operation(kind=CREATE, name=name) for name in missing]
        return record.model_copy(update={
            "created_instance_ids": [] if waiting_for else missing,
            "resumed_instance_ids": stopped, "operations": operations,
            "waiting_for": waiting_for})

    def _create_vms(self, config: ProvisionConfig, group: str, names: list[str]) -> str:
        """Start creating the VMs once their network is made; until then, one step towards
        it, and what is still being made."""
        region, cluster, zone = config.region, config.cluster_name, res.azure_zone(config.zone)
        self._resources.resource_groups.create_or_update(
            group, ResourceGroup(location=region, tags={TAG_CLUSTER: cluster}))
        waiting_for, nic_ids = self._cluster_network(region, cluster).prepare(
            names, set(config.ports), zone, res.accelerated_networking(config))
        if waiting_for:
            return waiting_for
        _start_all(partial(
            self._compute.virtual_machines.begin_create_or_update, group, name,
            res.vm_body(config, name, name == res.head_name(cluster), nic_ids[name]),
            polling=False) for name in names)
        return ""

    def _cluster_network(self, region: str, cluster_name: str) -> ClusterNetwork:
        return ClusterNetwork(self._network, res.resource_group_name(cluster_name, region),
                              region, cluster_name)

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        """Each operation through the provisioning state of what it acts on: running while
        it is Creating, Updating or Deleting, failed when Failed (a VM's instance view
        says why); a group's delete through ARM's record of it (:mod:`azure_groups`).
        Raises the first failure once none is left running."""
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            vms = {vm.name: vm for vm in self._cluster_vms(region, cluster_name)} if any(
                op.kind in VM_OPERATIONS for op in operations) else {}
            states = [self._state_of(op, region, group, vms) for op in operations]
        running = [f"{op} {state}" for op, state in zip(operations, states, strict=True)
                   if state in _IN_PROGRESS]
        if running:
            return StateCheck(done=False, seen=", ".join(running))
        for op, state in zip(operations, states, strict=True):
            if state == "Failed":
                vm = vms.get(op.name)
                if vm is not None and (failure := vm_failure(vm)):
                    raise classify(*failure, status=None, region=region, zone=vm_zone(vm))
                raise ProvisionError(f"Azure {region}: {op} failed", code="ProvisioningFailed",
                                     scope=BlockScope.REGION)
        return StateCheck(done=True, seen=", ".join(f"{op} done" for op in operations))

    def _state_of(self, op: Operation, region: str, group: str,
                  vms: dict[str | None, VirtualMachine]) -> str:
        """The provisioning state that tells how ``op`` goes ("" once its resource is
        gone)."""
        if op.kind == DELETE_GROUP:
            return delete_state(self._resources, op, endpoint=self.endpoint,
                                subscription_id=self.subscription_id, region=region)
        if op.kind in VM_OPERATIONS:
            resource: Any = vms.get(op.name)
        else:
            resource = self._get(self._network.network_security_groups.get, group, op.name)
        return provisioning_state(resource) if resource is not None else ""

    @staticmethod
    def _get(read: Callable[..., T], *names: str) -> T | None:
        try:
            return read(*names)
        except ResourceNotFoundError as err:
            if not is_absent(err):
                raise
            return None

    def check_instances(self, region: str, cluster_name: str, state: InstanceStatus) -> StateCheck:
        """A VM whose operation failed raises its translated error; one settled in the
        other state (RUNNING vs STOPPED) raises at once."""
        with translated(region):
            vms = self._cluster_vms(region, cluster_name)
            if not vms:
                raise ProvisionError(f"Azure {region}: cluster {cluster_name} has no VMs",
                                     code="ClusterNotFound", scope=BlockScope.REGION)
            for vm in vms:
                failure = vm_failure(vm)
                if failure:
                    raise classify(*failure, status=None, region=region, zone=vm_zone(vm))
            statuses = {vm.name: vm_status(vm) for vm in vms}
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
            return {vm.name or "": vm_status(vm)
                    for vm in self._cluster_vms(region, cluster_name)}

    def get_cluster_info(self, region: str, cluster_name: str) -> ClusterInfo:
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            vms = [vm for vm in self._cluster_vms(region, cluster_name)
                   if vm_status(vm) != InstanceStatus.TERMINATING]
            if not vms:
                return ClusterInfo(cloud=self.name, region=region)
            nics = {(nic.id or "").lower(): nic
                    for nic in self._network.network_interfaces.list(group)}
            ips = {(ip.id or "").lower(): ip.properties.ip_address if ip.properties else None
                   for ip in self._network.public_ip_addresses.list(group)}
        nodes = []
        for vm in vms:
            nic = nics.get(nic_id(vm))
            configs = (nic.properties.ip_configurations if nic and nic.properties else None)
            ip_config = configs[0].properties if configs else None
            public = ip_config.public_ip_address if ip_config else None
            nodes.append(NodeInfo(
                instance_id=vm.name or "",
                internal_ip=(ip_config.private_ip_address if ip_config else None) or "",
                external_ip=ips.get((public.id or "").lower()) if public else None,
                is_head=is_head(vm),
                ssh_user=res.ADMIN_USER,
            ))
        head = vms[0]
        size = head.properties.hardware_profile if head.properties else None
        return ClusterInfo(cloud=self.name, region=region, zone=vm_zone(head),
                           instance_type=size.vm_size if size else None, nodes=nodes)

    def stop_instances(self, region: str, cluster_name: str, worker_only: bool = False
                       ) -> list[Operation]:
        """Start deallocating (compute billing stops; disks and IPs stay)."""
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            names = [vm.name or "" for vm in self._cluster_vms(region, cluster_name)
                     if not (worker_only and is_head(vm))
                     and vm_status(vm) in (InstanceStatus.PENDING, InstanceStatus.RUNNING)]
            _start_all(partial(self._compute.virtual_machines.begin_deallocate, group, name,
                               polling=False) for name in names)
        return [Operation(kind=DEALLOCATE, name=name) for name in names]

    def terminate_instances(
        self, region: str, cluster_name: str, worker_only: bool = False
    ) -> list[Operation]:
        """The whole cluster: start deleting its resource group (everything in it goes,
        disks included). Workers only: their VMs, whose NICs and IPs go with them."""
        group = res.resource_group_name(cluster_name, region)
        with translated(region):
            if not worker_only:  # nothing when already gone, or never created
                started = start_delete(self._resources, group, self.subscription_id)
                return [started] if started else []
            workers = [vm.name or "" for vm in self._cluster_vms(region, cluster_name)
                       if not is_head(vm)]
            _start_all(partial(self._compute.virtual_machines.begin_delete, group, name,
                               polling=False) for name in workers)
        return [Operation(kind=DELETE, name=name) for name in workers]

    def open_ports(self, region: str, cluster_name: str, ports: list[str]
                   ) -> list[Operation]:
        with translated(region):
            _, started = self._cluster_network(region, cluster_name).security_group(set(ports))
        return [Operation(kind=UPDATE, name=res.nsg_name(cluster_name))] if started else []

    def cleanup_ports(self, region: str, cluster_name: str) -> list[Operation]:
        """Close every port but SSH; nothing to do when the cluster's group is gone."""
        with translated(region):
            started = self._cluster_network(region, cluster_name).close_ports()
        return [Operation(kind=UPDATE, name=res.nsg_name(cluster_name))] if started else []

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
