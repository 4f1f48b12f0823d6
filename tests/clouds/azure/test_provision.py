"""The Azure provider's cluster lifecycle against the ARM fake: create, query, stop,
resume, terminate, ports, and idempotent re-runs."""

from __future__ import annotations

import pytest

from orch.clouds.azure import AzureProvider
from orch.clouds.base import InstanceStatus, Provider
from orch.clouds.errors import ProvisionError
from orch.clouds.tiers import DiskTier, NetworkTier, disk_tier_fits
from tests.clouds.azure.support import SSH_KEY, config
from tests.clouds.waits import provisioned, settle, wait_instances
from tests.fakes.azure_arm_fake import AzureArmFake

RUNNING = InstanceStatus.RUNNING
STOPPED = InstanceStatus.STOPPED
VMS = "Microsoft.Compute/virtualMachines"
NICS = "Microsoft.Network/networkInterfaces"
IPS = "Microsoft.Network/publicIPAddresses"
NSGS = "Microsoft.Network/networkSecurityGroups"


def _creates(fake: AzureArmFake) -> int:
    return sum(1 for call in fake.calls if call.endswith("_CreateOrUpdate"))


def _ids(fake: AzureArmFake) -> set[str]:
    return {r["id"] for kind in (VMS, NICS, IPS, NSGS) for r in fake.resources(kind)}


def _nsg_ports(fake: AzureArmFake) -> dict[str, str]:
    (nsg,) = fake.resources(NSGS)
    return {rule["name"]: rule["properties"]["destinationPortRange"]
            for rule in nsg["properties"]["securityRules"]}


def test_is_a_provider(provider: AzureProvider) -> None:
    assert isinstance(provider, Provider)
    assert provider.name == "azure"


def test_cluster_lifecycle(provider: AzureProvider, fake: AzureArmFake) -> None:
    record = provisioned(provider, config("c1", 2, ports=["8080"]))
    assert record.head_instance_id == "c1-head"
    assert record.created_instance_ids == ["c1-head", "c1-worker-1"]
    assert record.resumed_instance_ids == []
    assert fake.resource_groups() == ["orch-c1-eastus"]

    vms = {vm["name"]: vm for vm in fake.resources(VMS)}
    head = vms["c1-head"]
    assert head["tags"] == {"orch-cluster": "c1", "orch-node": "head"}
    assert vms["c1-worker-1"]["tags"]["orch-node"] == "worker"
    assert head["properties"]["hardwareProfile"]["vmSize"] == "Standard_D2s_v3"
    assert head["properties"]["storageProfile"]["imageReference"]["publisher"] == "Canonical"
    assert head["properties"]["storageProfile"]["osDisk"]["diskSizeGB"] == 256
    keys = head["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    assert keys == [{"path": "/home/azureuser/.ssh/authorized_keys", "keyData": SSH_KEY}]
    assert "priority" not in head["properties"]
    assert _nsg_ports(fake) == {"orch-ssh": "22", "orch-port-8080": "8080"}

    assert provider.query_instances("eastus", "c1") == {"c1-head": RUNNING,
                                                         "c1-worker-1": RUNNING}
    wait_instances(provider, "eastus", "c1", RUNNING)

    info = provider.get_cluster_info("eastus", "c1")
    assert info.cloud == "azure" and info.instance_type == "Standard_D2s_v3"
    assert [n.instance_id for n in info.nodes] == ["c1-head", "c1-worker-1"]
    assert info.head is not None and info.head.instance_id == "c1-head"
    assert [n.is_head for n in info.nodes] == [True, False]
    assert all(n.internal_ip.startswith("10.0.") for n in info.nodes)
    assert all(n.external_ip and n.external_ip.startswith("203.0.113.") for n in info.nodes)
    assert len({n.internal_ip for n in info.nodes}) == 2
    assert all(n.runner == "ssh" and n.ssh_user == "azureuser" for n in info.nodes)

    settle(provider, "eastus", "c1", provider.stop_instances("eastus", "c1"))
    assert fake.power_state("c1-head") == "deallocated"
    assert provider.query_instances("eastus", "c1") == {"c1-head": STOPPED,
                                                         "c1-worker-1": STOPPED}
    wait_instances(provider, "eastus", "c1", STOPPED)

    resumed = provisioned(provider, config("c1", 2, ports=["8080"]))
    assert resumed.resumed_instance_ids == ["c1-head", "c1-worker-1"]
    assert resumed.created_instance_ids == []
    assert fake.count("VirtualMachines_Start") == 2
    assert provider.query_instances("eastus", "c1") == {"c1-head": RUNNING,
                                                         "c1-worker-1": RUNNING}
    # the same machines, with the same addresses
    assert provider.get_cluster_info("eastus", "c1") == info

    (delete,) = provider.terminate_instances("eastus", "c1")
    assert delete.kind == "delete-group" and fake.resource_groups() == ["orch-c1-eastus"]
    settle(provider, "eastus", "c1", [delete])
    assert provider.query_instances("eastus", "c1") == {}
    assert fake.resource_groups() == []
    assert _ids(fake) == set()


def test_rerun_creates_nothing_new(provider: AzureProvider, fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 3))
    before, creates = _ids(fake), _creates(fake)

    again = provisioned(provider, config("c1", 3))

    assert again.created_instance_ids == [] and again.resumed_instance_ids == []
    assert _creates(fake) == creates
    assert _ids(fake) == before
    assert len(fake.resources(VMS)) == 3


def test_growing_a_cluster_creates_only_the_shortfall(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    provisioned(provider, config("c1", 1))
    record = provisioned(provider, config("c1", 3))
    assert record.created_instance_ids == ["c1-worker-1", "c1-worker-2"]
    assert sorted(vm["name"] for vm in fake.resources(VMS)) == [
        "c1-head", "c1-worker-1", "c1-worker-2"]
    assert len(fake.resources(NSGS)) == 1


def test_nodes_ordered_head_first_then_by_index(provider: AzureProvider) -> None:
    provisioned(provider, config("big", 11))
    names = [n.instance_id for n in provider.get_cluster_info("eastus", "big").nodes]
    assert names == ["big-head"] + [f"big-worker-{i}" for i in range(1, 11)]


def test_spot_and_zone(provider: AzureProvider, fake: AzureArmFake) -> None:
    record = provisioned(provider, config("s1", 1, use_spot=True, zone="eastus-2",
                                           image_id="Canonical:ubuntu-24_04-lts:server:latest"))
    assert record.zone == "2"
    (vm,) = fake.resources(VMS)
    assert vm["zones"] == ["2"]
    assert vm["properties"]["priority"] == "Spot"
    assert vm["properties"]["evictionPolicy"] == "Deallocate"
    assert vm["properties"]["billingProfile"] == {"maxPrice": -1}
    assert vm["properties"]["storageProfile"]["imageReference"] == {
        "publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server",
        "version": "latest"}
    (ip,) = fake.resources(IPS)
    assert ip["zones"] == ["2"] and ip["sku"] == {"name": "Standard"}
    assert provider.get_cluster_info("eastus", "s1").zone == "2"


def test_worker_only_stop_and_terminate(provider: AzureProvider, fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 3))

    settle(provider, "eastus", "c1", provider.stop_instances("eastus", "c1", worker_only=True))
    assert provider.query_instances("eastus", "c1") == {
        "c1-head": RUNNING, "c1-worker-1": STOPPED, "c1-worker-2": STOPPED}

    deletes = provider.terminate_instances("eastus", "c1", worker_only=True)
    assert [op.name for op in deletes] == ["c1-worker-1", "c1-worker-2"]
    settle(provider, "eastus", "c1", deletes)  # their NICs and IPs go with them
    assert provider.query_instances("eastus", "c1") == {"c1-head": RUNNING}
    assert [r["name"] for r in fake.resources(NICS)] == ["c1-head-nic"]
    assert [r["name"] for r in fake.resources(IPS)] == ["c1-head-ip"]
    assert fake.resource_groups() == ["orch-c1-eastus"]


def test_wait_polls_until_stopped(provider: AzureProvider, fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 1))
    provider.stop_instances("eastus", "c1")
    fake.hold_power_state("c1-head", "deallocating", reads=3)
    assert provider.query_instances("eastus", "c1") == {"c1-head": InstanceStatus.STOPPING}
    lists = fake.count("VirtualMachines_List")

    wait_instances(provider, "eastus", "c1", STOPPED)

    assert fake.count("VirtualMachines_List") - lists == 3  # two more deallocating, then done


def test_wait_for_a_state_the_cluster_left_raises(provider: AzureProvider) -> None:
    provisioned(provider, config("c1", 1))
    with pytest.raises(ProvisionError, match="c1-head is RUNNING") as caught:
        wait_instances(provider, "eastus", "c1", STOPPED)
    assert caught.value.code == "UnexpectedState"


def test_resume_while_stopping_waits_then_starts(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    provisioned(provider, config("c1", 1))
    settle(provider, "eastus", "c1", provider.stop_instances("eastus", "c1"))
    fake.hold_power_state("c1-head", "deallocating", reads=1)
    assert provider.run_instances(config("c1", 1)).waiting_for == "c1-head deallocating"
    assert fake.count("VirtualMachines_Start") == 0
    assert provisioned(provider, config("c1", 1)).resumed_instance_ids == ["c1-head"]


def test_ports_opened_and_cleaned_up(provider: AzureProvider, fake: AzureArmFake) -> None:
    provisioned(provider, config("c1", 1, ports=["8080"]))

    settle(provider, "eastus", "c1", provider.open_ports("eastus", "c1", ["9000-9010", "8080"]))
    assert _nsg_ports(fake) == {"orch-ssh": "22", "orch-port-8080": "8080",
                                "orch-port-9000-9010": "9000-9010"}
    puts = fake.count("NetworkSecurityGroups_CreateOrUpdate")
    assert provider.open_ports("eastus", "c1", ["8080"]) == []  # already open: no write
    assert fake.count("NetworkSecurityGroups_CreateOrUpdate") == puts

    settle(provider, "eastus", "c1", provider.cleanup_ports("eastus", "c1"))
    assert _nsg_ports(fake) == {"orch-ssh": "22"}


def test_teardown_of_a_cluster_that_does_not_exist(
    provider: AzureProvider, fake: AzureArmFake
) -> None:
    assert provider.query_instances("eastus", "ghost") == {}
    assert provider.get_cluster_info("eastus", "ghost").nodes == []
    provider.stop_instances("eastus", "ghost")
    provider.terminate_instances("eastus", "ghost")
    provider.terminate_instances("eastus", "ghost", worker_only=True)
    provider.cleanup_ports("eastus", "ghost")
    assert fake.count("ResourceGroups_Delete") == 1
    assert _creates(fake) == 0


def test_disk_tier_labels_and_network_tier_reach_arm(
    fake: AzureArmFake, provider: AzureProvider
) -> None:
    """Premium_LRS for disk_tier high on an "s" size, the labels as tags beside orch's,
    accelerated networking on the NICs for network_tier best (orch.clouds.tiers)."""
    provisioned(provider, config(num_nodes=1, cpus=2, disk_tier=DiskTier.HIGH,
                                  network_tier=NetworkTier.BEST, labels={"project": "llm"}))
    (vm,) = fake.resources(VMS)
    disk = vm["properties"]["storageProfile"]["osDisk"]["managedDisk"]
    assert disk["storageAccountType"] == "Premium_LRS"
    assert vm["tags"]["project"] == "llm" and vm["tags"]["orch-cluster"] == "c1"
    (nic,) = fake.resources(NICS)
    assert nic["properties"]["enableAcceleratedNetworking"] is True


def test_premium_on_a_size_without_premium_storage_is_refused_by_azure(
    fake: AzureArmFake, provider: AzureProvider
) -> None:
    """The optimizer never plans it (disk_tier_fits); should it get here, Azure's 409."""
    assert not disk_tier_fits("azure", DiskTier.HIGH, "Standard_D2_v3")
    with pytest.raises(ProvisionError) as caught:
        provisioned(provider, config(num_nodes=1, instance_type="Standard_D2_v3",
                                      disk_tier=DiskTier.HIGH))
    assert "does not support the storage account type Premium_LRS" in str(caught.value)
    provisioned(provider, config(cluster="c2", num_nodes=1, instance_type="Standard_D2_v3"))
    (vm,) = [v for v in fake.resources(VMS) if v["name"].startswith("c2")]
    assert vm["properties"]["storageProfile"]["osDisk"]["managedDisk"][
        "storageAccountType"] == "StandardSSD_LRS"
