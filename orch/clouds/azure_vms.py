"""How orch reads an Azure VM (listed with ``$expand=instanceView``): its state, the
failure of its last operation, and its place in the cluster."""

from __future__ import annotations

from azure.mgmt.compute.models import VirtualMachine

from orch.clouds.base import TAG_NODE_KIND, InstanceStatus

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


def vm_status(vm: VirtualMachine) -> InstanceStatus:
    """A VM's state from its provisioning state and ``PowerState/...`` status; a VM that
    is still being created has no power state yet (PENDING)."""
    if vm.properties and vm.properties.provisioning_state == "Deleting":
        return InstanceStatus.TERMINATING
    for code, _ in _statuses(vm):
        if code.startswith("PowerState/"):
            return _POWER_STATES.get(code.removeprefix("PowerState/"), InstanceStatus.PENDING)
    return InstanceStatus.PENDING


def vm_failure(vm: VirtualMachine) -> tuple[str, str] | None:
    """The error code and message of a VM whose last operation failed."""
    if not vm.properties or vm.properties.provisioning_state != "Failed":
        return None
    for code, message in _statuses(vm):
        if code.startswith("ProvisioningState/failed/"):
            return code.removeprefix("ProvisioningState/failed/"), message
    return "ProvisioningFailed", f"{vm.name} is in provisioning state Failed"


def is_head(vm: VirtualMachine) -> bool:
    return (vm.tags or {}).get(TAG_NODE_KIND) == "head"


def node_order(vm: VirtualMachine) -> tuple[int, int, str]:
    """Head first, then workers by their index (worker-2 before worker-10)."""
    name = vm.name or ""
    index = name.rsplit("-", 1)[-1]
    return (0 if is_head(vm) else 1, int(index) if index.isdigit() else 0, name)


def vm_zone(vm: VirtualMachine) -> str | None:
    return vm.zones[0] if vm.zones else None


def nic_id(vm: VirtualMachine) -> str:
    """The (lower-case) id of the VM's primary network interface."""
    profile = vm.properties.network_profile if vm.properties else None
    refs = (profile.network_interfaces if profile else None) or []
    return (refs[0].id or "").lower() if refs else ""
