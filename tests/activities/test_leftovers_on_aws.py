"""Nothing left behind on AWS (issue 12): a failover across two regions and a launch that
failed everywhere leave no instance, security group, key pair or volume of the cluster in
any region once the failover's own cleanup and ``down`` are done.

The real ClusterWorkflow, LaunchWorkflow, FailoverWorkflow and TeardownWorkflow run with
their real activities against moto's EC2 behind the fault front; what is left is read
from moto itself.
"""

from __future__ import annotations

from orch.records import CloudRegion
from orch.spec import Task
from tests.activities.conftest import EAST_1, EAST_2, INSTANCE_TYPE, Clusters, Moto
from tests.activities.profiles import aws_leftovers as leftovers
from tests.fakes.ec2_fault_front import EC2FaultFront

ZONES = "abcdf"  # the zones of us-east-1 that orch's catalog sells m6id.large in
EAST_1_THEN_2 = Task.model_validate({"name": "train", "num_nodes": 2, "resources": {
    "cloud": "aws", "ordered": [{"region": region, "instance_type": INSTANCE_TYPE}
                                for region in (EAST_1, EAST_2)]}})
BOTH = [CloudRegion(cloud="aws", region=EAST_1), CloudRegion(cloud="aws", region=EAST_2)]


def nothing_anywhere(moto: Moto, cluster_name: str) -> bool:
    return not leftovers(moto, EAST_1, cluster_name) and not leftovers(moto, EAST_2,
                                                                        cluster_name)


async def test_a_failover_to_a_second_region_then_down_leaves_nothing(
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str, clusters: Clusters,
) -> None:
    # In every zone of us-east-1 the head launches and the worker finds no capacity: each
    # attempt makes the security group, the key pair and an instance there.
    for zone in ZONES:
        aws_env.fail("RunInstances", "InsufficientInstanceCapacity", zone=f"{EAST_1}{zone}",
                     skip=1)
    cluster = await clusters.start(cluster_name)

    output = await clusters.fail_over(cluster, EAST_1_THEN_2)

    assert output.placement.region == EAST_2
    assert {a.zone for a in output.history} == {f"{EAST_1}{z}" for z in ZONES}
    assert leftovers(moto, EAST_1, cluster_name) == {}  # the failover cleaned up there
    assert set(leftovers(moto, EAST_2, cluster_name)) == {
        "instances", "security groups", "key pairs", "volumes"}
    assert (await clusters.record(cluster)).regions == BOTH[1:]

    result = await clusters.down(cluster)

    assert result.message == f"Cluster {cluster_name}: 2 instance(s) terminated."
    assert nothing_anywhere(moto, cluster_name)


async def test_what_a_launch_that_failed_everywhere_could_not_clean_is_cleaned_by_down(
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str, clusters: Clusters,
) -> None:
    # No capacity anywhere (only the very first head launches), and the failover's own
    # cleanup is refused in both regions: what it made there stays until down.
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity", skip=1)
    aws_env.fail("DeleteSecurityGroup", "UnauthorizedOperation", times=2)
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, EAST_1_THEN_2)

    state = await clusters.record(cluster)
    assert state.placement is None and state.regions == BOTH  # never provisioned
    for region in (EAST_1, EAST_2):  # instances and key pairs gone, security groups left
        assert list(leftovers(moto, region, cluster_name)) == ["security groups"]

    result = await clusters.down(cluster)

    assert result.message == (f"Cluster {cluster_name} was never provisioned: cleaned up after "
                              f"its launch attempts in aws {EAST_1}, aws {EAST_2}.")
    assert nothing_anywhere(moto, cluster_name)


async def test_a_launch_that_failed_everywhere_cleans_up_after_itself(
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str, clusters: Clusters,
) -> None:
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity", skip=1)
    cluster = await clusters.start(cluster_name)

    await clusters.launch_fails(cluster, EAST_1_THEN_2)

    assert nothing_anywhere(moto, cluster_name)
    assert (await clusters.record(cluster)).regions == []  # nothing left for down to find
    result = await clusters.down(cluster)
    assert result.message == f"Cluster {cluster_name} was never provisioned: nothing to tear down."
