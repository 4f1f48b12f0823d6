"""Nothing left behind on GCP (issue 12): a failover across two regions and a launch that
failed everywhere leave no instance (boot disks go with them) and no firewall rule of the
cluster once the failover's own cleanup and ``down`` are done; and cleaning the region a
failover left never deletes the rule (global on GCP) the cluster still uses elsewhere.

The real workflows run with their real activities against the Compute Engine fake; the
activities' provider is pointed at it, and the waiter polls it without a real cloud's pauses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

import activities.plan
import activities.provision
from orch.clouds import get_provider
from orch.clouds.base import Provider
from orch.clouds.gcp import GCPProvider
from orch.clouds.gcp_client import GCPSettings
from orch.records import CloudRegion
from orch.spec import Task
from tests.activities.conftest import Clusters, real_worker
from tests.activities.profiles import gcp_leftovers as leftovers
from tests.fakes.gcp_compute_fake import GCPComputeFake

CENTRAL, EAST = "us-central1", "us-east1"
# The zones orch's catalog lists for n2-standard-8 in the two regions.
ZONES = {CENTRAL: ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"],
         EAST: ["us-east1-b", "us-east1-c", "us-east1-d"]}
CENTRAL_THEN_EAST = Task.model_validate({"name": "train", "num_nodes": 2, "resources": {
    "cloud": "gcp", "ordered": [
        {"region": region, "instance_type": "n2-standard-8", "ports": [8080]}
        for region in (CENTRAL, EAST)]}})
BOTH = [CloudRegion(cloud="gcp", region=CENTRAL), CloudRegion(cloud="gcp", region=EAST)]


@pytest.fixture
def gcp() -> Iterator[GCPComputeFake]:
    with GCPComputeFake(regions=ZONES) as fake:
        yield fake


@pytest_asyncio.fixture
async def task_queue(time_skipping_env: WorkflowEnvironment, gcp: GCPComputeFake,
                     orch_home: Path, monkeypatch: pytest.MonkeyPatch,
                     quick_polls: None) -> AsyncIterator[str]:
    """A worker whose activities provision on the fake (GCP is the one cloud enabled)."""
    settings = GCPSettings(project=gcp.project, endpoint=gcp.endpoint)

    def provider(cloud: str) -> Provider:
        if cloud != "gcp":
            return get_provider(cloud)
        return GCPProvider(settings)

    monkeypatch.setattr(activities.provision, "get_provider", provider)
    monkeypatch.setattr(activities.plan, "enabled_clouds", lambda: ("gcp",))
    async with real_worker(time_skipping_env, "gcp") as queue:
        yield queue


def no_capacity_for_workers(gcp: GCPComputeFake, region: str, **fault: Any) -> None:
    """In each zone of ``region``, the head's insert goes through and the worker's
    operation ends ZONE_RESOURCE_POOL_EXHAUSTED."""
    for zone in ZONES[region]:
        gcp.fail_operation("instances.insert", "ZONE_RESOURCE_POOL_EXHAUSTED", zone=zone,
                           skip=1, **fault)


async def test_a_failover_to_a_second_region_then_down_leaves_nothing(
    gcp: GCPComputeFake, cluster_name: str, clusters: Clusters,
) -> None:
    no_capacity_for_workers(gcp, CENTRAL)
    cluster = await clusters.start(cluster_name)

    output = await clusters.fail_over(cluster, CENTRAL_THEN_EAST)

    assert output.placement.region == EAST
    assert [a.zone for a in output.history] == ZONES[CENTRAL]
    # us-central1 was cleaned after the failover, but the rule serves the nodes in us-east1.
    assert leftovers(gcp, cluster_name) == {
        "instances": [f"{cluster_name}-head", f"{cluster_name}-worker-1"],
        "firewalls": [f"orch-{cluster_name}-ports"]}
    assert {i["zone"].rsplit("/", 1)[-1] for i in gcp.instances().values()} == {"us-east1-b"}
    assert (await clusters.record(cluster)).regions == BOTH[1:]

    result = await clusters.down(cluster)

    assert result.message == f"Cluster {cluster_name}: 2 instance(s) terminated."
    assert leftovers(gcp, cluster_name) == {}


def failing_after_the_rule(gcp: GCPComputeFake) -> None:
    """Every attempt makes both nodes and the firewall rule, then fails: the third
    machineTypes.get of each zone (check_quota, run_instances, get_cluster_info) finds
    no capacity."""
    for zone in ZONES[CENTRAL] + ZONES[EAST]:
        gcp.fail_http("machineTypes.get", 503, "insufficientCapacity", zone=zone, skip=2)


async def test_what_a_launch_that_failed_everywhere_could_not_clean_is_cleaned_by_down(
    gcp: GCPComputeFake, cluster_name: str, clusters: Clusters,
) -> None:
    failing_after_the_rule(gcp)
    gcp.fail_http("firewalls.delete", 403, "forbidden", times=2)  # the failover's cleanup
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, CENTRAL_THEN_EAST)

    state = await clusters.record(cluster)
    assert state.placement is None and state.regions == BOTH
    assert leftovers(gcp, cluster_name) == {"firewalls": [f"orch-{cluster_name}-ports"]}

    result = await clusters.down(cluster)

    assert result.message == (f"Cluster {cluster_name} was never provisioned: cleaned up after "
                              f"its launch attempts in gcp {CENTRAL}, gcp {EAST}.")
    assert leftovers(gcp, cluster_name) == {}


async def test_a_launch_that_failed_everywhere_cleans_up_after_itself(
    gcp: GCPComputeFake, cluster_name: str, clusters: Clusters,
) -> None:
    failing_after_the_rule(gcp)
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, CENTRAL_THEN_EAST)

    assert leftovers(gcp, cluster_name) == {}
    assert (await clusters.record(cluster)).regions == []
    result = await clusters.down(cluster)
    assert result.message == f"Cluster {cluster_name} was never provisioned: nothing to tear down."
