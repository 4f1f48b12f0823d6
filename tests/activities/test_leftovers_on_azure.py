"""Nothing left behind on Azure (issue 12): a failover across two regions and a launch that
failed everywhere leave no resource group of the cluster, nor anything in one (VMs and
their disks, NICs, public IPs, security groups, virtual networks), once the failover and
``down`` are done.

The real workflows run with their real activities against the ARM fake; the activities'
provider is pointed at it (a static token), and the waiter polls it without a real cloud's
pauses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

import activities.plan
import activities.provision
from orch.clouds import get_provider
from orch.clouds.azure import AzureProvider
from orch.clouds.base import Provider
from orch.records import CloudRegion
from orch.spec import Task
from tests.activities.conftest import Clusters, real_worker
from tests.activities.profiles import azure_leftovers as leftovers
from tests.clouds.azure.conftest import fake  # noqa: F401 (the fixture)
from tests.clouds.azure.support import StaticToken
from tests.fakes.azure_arm_fake import AzureArmFake

EAST, WEST = "eastus", "westus2"
EAST_THEN_WEST = Task.model_validate({"name": "train", "num_nodes": 2, "resources": {
    "cloud": "azure", "ordered": [
        {"region": region, "instance_type": "Standard_D2s_v3", "ports": [8080]}
        for region in (EAST, WEST)]}})
CREATE_VM = "VirtualMachines_CreateOrUpdate"


@pytest.fixture
def azure(fake: AzureArmFake) -> AzureArmFake:  # noqa: F811 (the imported fixture)
    """The ARM fake, with the environment pointing the Azure SDK at it."""
    return fake


@pytest_asyncio.fixture
async def task_queue(time_skipping_env: WorkflowEnvironment, azure: AzureArmFake,
                     orch_home: Path, monkeypatch: pytest.MonkeyPatch,
                     quick_polls: None) -> AsyncIterator[str]:
    """A worker whose activities provision on the fake (Azure is the one cloud enabled)."""

    def provider(cloud: str) -> Provider:
        if cloud != "azure":
            return get_provider(cloud)
        return AzureProvider(credential=StaticToken(azure.token))

    monkeypatch.setattr(activities.provision, "get_provider", provider)
    monkeypatch.setattr(activities.plan, "enabled_clouds", lambda: ("azure",))
    async with real_worker(time_skipping_env, "azure") as queue:
        yield queue


async def test_a_failover_to_a_second_region_then_down_leaves_nothing(
    azure: AzureArmFake, cluster_name: str, clusters: Clusters,
) -> None:
    # eastus has no capacity: a VM's creation fails there after its group, network, IPs
    # and NICs were made (AllocationFailed blocks the region).
    azure.inject_fault(CREATE_VM, "AllocationFailed", "no capacity for Standard_D2s_v3",
                       in_operation=True)
    cluster = await clusters.start(cluster_name)

    output = await clusters.fail_over(cluster, EAST_THEN_WEST)

    assert output.placement.region == WEST
    assert [a.candidate.region for a in output.history] == [EAST]
    left = leftovers(azure, cluster_name)
    assert left["resourceGroups"] == [f"orch-{cluster_name}-{WEST}"]  # eastus's is gone
    assert len(left["virtualMachines"]) == len(left["networkInterfaces"]) == 2
    assert (await clusters.record(cluster)).regions == [CloudRegion(cloud="azure",
                                                                    region=WEST)]

    result = await clusters.down(cluster)

    assert result.message == f"Cluster {cluster_name}: 2 instance(s) terminated."
    assert leftovers(azure, cluster_name) == {}


async def test_a_launch_whose_cleanup_failed_is_cleaned_by_down(
    azure: AzureArmFake, cluster_name: str, clusters: Clusters,
) -> None:
    # No capacity in eastus, and the failover cannot delete what it made there: the
    # launch stops (a partial cluster it cannot remove), never provisioned.
    azure.inject_fault(CREATE_VM, "AllocationFailed", in_operation=True)
    azure.inject_fault("ResourceGroups_Delete", "AuthorizationFailed", status=403)
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, EAST_THEN_WEST)

    state = await clusters.record(cluster)
    assert state.placement is None
    assert state.regions == [CloudRegion(cloud="azure", region=EAST)]
    assert leftovers(azure, cluster_name)["resourceGroups"] == [f"orch-{cluster_name}-{EAST}"]

    result = await clusters.down(cluster)

    assert result.message.startswith(f"Cluster {cluster_name} was never provisioned: cleaned "
                                      f"up after its launch attempts in azure {EAST}")
    assert leftovers(azure, cluster_name) == {}


async def test_a_launch_that_failed_everywhere_cleans_up_after_itself(
    azure: AzureArmFake, cluster_name: str, clusters: Clusters,
) -> None:
    azure.inject_fault(CREATE_VM, "AllocationFailed", in_operation=True, times=4)  # 2 VMs x 2
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, EAST_THEN_WEST)

    assert leftovers(azure, cluster_name) == {}
    assert (await clusters.record(cluster)).regions == []
    result = await clusters.down(cluster)
    assert result.message == f"Cluster {cluster_name} was never provisioned: nothing to tear down."
