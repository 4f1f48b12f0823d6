"""The bulk teardown's ``teardown_clusters`` activity, real, against moto's EC2 through the
fault front: many clusters emptied in one call, one cluster's failure kept to itself, and
an attempt after a crash going on from its heartbeat details."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.bulk_teardown import teardown_clusters
from orch.bulk_teardown import ClusterOutcome, ClustersRequest
from tests.activities.conftest import EAST_1, Moto
from tests.activities.test_teardown_on_aws import assert_gone, launch
from tests.fakes.ec2_fault_front import EC2FaultFront


def names(count: int) -> list[str]:
    return [f"t-{uuid.uuid4().hex[:10]}" for _ in range(count)]


def run(request: ClustersRequest, earlier: list[ClusterOutcome] | None = None
        ) -> tuple[list[ClusterOutcome], set[str]]:
    """The activity's outcomes, and the clusters its last heartbeat said were emptied."""
    heartbeats: list[Any] = []
    env = ActivityEnvironment()
    if earlier is not None:
        env.info = dataclasses.replace(env.info, heartbeat_details=[
            [o.model_dump() for o in earlier]])
    env.on_heartbeat = lambda *details: heartbeats.append(details[0])
    outcomes = env.run(teardown_clusters, request)
    return outcomes, {ClusterOutcome.model_validate(o).cluster for o in heartbeats[-1]}


def test_many_clusters_are_emptied_in_one_call(
    aws_env: EC2FaultFront, moto: Moto, quick_polls: None,
) -> None:
    up, never_made = names(3), names(1)[0]
    made = {name: launch(name, num_nodes=1 + i % 2) for i, name in enumerate(up)}

    outcomes, emptied = run(ClustersRequest(cloud="aws", region=EAST_1,
                                            clusters=[*up, never_made]))

    assert [o.cluster for o in outcomes] == [*up, never_made]  # the request's order
    assert all(not o.error for o in outcomes)
    for outcome in outcomes[:3]:
        assert sorted(outcome.instances) == sorted(made[outcome.cluster])
        assert_gone(moto, outcome.cluster, made[outcome.cluster])
        assert moto.ec2(EAST_1).describe_security_groups(Filters=[  # ports closed
            {"Name": "group-name", "Values": [f"orch-{outcome.cluster}"]}])[
                "SecurityGroups"] == []
    assert outcomes[3].instances == []
    assert emptied == {*up, never_made}  # what an attempt after a crash would skip


def test_a_cluster_whose_terminate_fails_does_not_hold_up_the_others(
    aws_env: EC2FaultFront, moto: Moto, quick_polls: None,
) -> None:
    clusters = names(3)
    made = {name: launch(name) for name in clusters}
    aws_env.fail("TerminateInstances", "UnauthorizedOperation", times=1)

    outcomes, emptied = run(ClustersRequest(cloud="aws", region=EAST_1, clusters=clusters))

    failed = [o for o in outcomes if o.error]
    assert len(failed) == 1 and "UnauthorizedOperation" in failed[0].error
    left = failed[0].cluster
    assert len(moto.instances(EAST_1, left)) == 2  # still there, for the workflow's retry
    for outcome in outcomes:
        if outcome.cluster != left:
            assert_gone(moto, outcome.cluster, made[outcome.cluster])
    assert left not in emptied


def test_an_attempt_after_a_crash_skips_the_clusters_already_emptied(
    aws_env: EC2FaultFront, moto: Moto, quick_polls: None,
) -> None:
    emptied_before, rest = names(2)
    made = {name: launch(name, num_nodes=1) for name in (emptied_before, rest)}
    # The first attempt's heartbeat said it had emptied this one; the cloud is not asked
    # about it again (its instance, left running here, shows that no call was made).
    earlier = [ClusterOutcome(cluster=emptied_before, instances=made[emptied_before])]

    outcomes, _ = run(ClustersRequest(cloud="aws", region=EAST_1,
                                      clusters=[emptied_before, rest]), earlier)

    assert outcomes == [earlier[0], ClusterOutcome(cluster=rest, instances=made[rest])]
    assert len(moto.instances(EAST_1, emptied_before)) == 1
    assert_gone(moto, rest, made[rest])
