"""Two control planes on one AWS account (moto's EC2), each with its own identity, use the
same user cluster name: each provisions its own instances, tagged with its own name on
cloud (orch.names), and a teardown by one leaves the other's running.

Provisioning and teardown run as they do under ``orch launch`` and ``orch down``: the
FailoverWorkflow and the TeardownWorkflow with their real activities, given the name on
cloud the cluster's record holds.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from orch.names import control_plane_hash, name_on_cloud
from orch.records import Placement, TeardownInput, TeardownResult
from orch.spec import Resources, Task
from tests.activities.conftest import EAST_1, INSTANCE_TYPE, Moto
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow
from workflows.teardown import TeardownWorkflow

TASK = Task(name="train", num_nodes=2, resources=Resources(
    cloud="aws", region=EAST_1, instance_type=INSTANCE_TYPE))


async def provision(env: WorkflowEnvironment, task_queue: str, user_name: str,
                    cloud_name: str) -> FailoverOutput:
    return await env.client.execute_workflow(
        FailoverWorkflow.run,
        FailoverInput(cluster_name=user_name, name_on_cloud=cloud_name, task=TASK),
        id=f"failover/{uuid.uuid4().hex[:12]}", task_queue=task_queue)


async def down(env: WorkflowEnvironment, task_queue: str, user_name: str, cloud_name: str,
               placement: Placement) -> TeardownResult:
    return await env.client.execute_workflow(
        TeardownWorkflow.run,
        TeardownInput(cluster_name=user_name, name_on_cloud=cloud_name, placement=placement),
        id=f"teardown/{uuid.uuid4().hex[:12]}", task_queue=task_queue)


def ids(output: FailoverOutput) -> list[str]:
    return sorted(node.instance_id for node in output.info.nodes)


async def test_two_control_planes_never_touch_each_others_instances(
    time_skipping_env: WorkflowEnvironment, task_queue: str, moto: Moto, cluster_name: str,
    tmp_path: Path,
) -> None:
    plane_a = control_plane_hash(tmp_path / "laptop-a", "embedded", env={})
    plane_b = control_plane_hash(tmp_path / "laptop-b", "embedded", env={})
    on_a, on_b = name_on_cloud(cluster_name, plane_a), name_on_cloud(cluster_name, plane_b)
    assert on_a != on_b

    made_a = await provision(time_skipping_env, task_queue, cluster_name, on_a)
    made_b = await provision(time_skipping_env, task_queue, cluster_name, on_b)

    # B launched its own nodes instead of adopting A's; nothing carries the user's name.
    assert len(ids(made_a)) == len(ids(made_b)) == 2
    assert not set(ids(made_a)) & set(ids(made_b))
    assert sorted(i["InstanceId"] for i in moto.instances(EAST_1, on_a)) == ids(made_a)
    assert sorted(i["InstanceId"] for i in moto.instances(EAST_1, on_b)) == ids(made_b)
    assert moto.instances(EAST_1, cluster_name) == []

    result = await down(time_skipping_env, task_queue, cluster_name, on_a, made_a.placement)

    assert sorted(result.instances) == ids(made_a)
    assert result.message == f"Cluster {cluster_name}: 2 instance(s) terminated."  # user's name
    assert moto.states(EAST_1, on_a) == dict.fromkeys(ids(made_a), "terminated")
    assert moto.states(EAST_1, on_b) == dict.fromkeys(ids(made_b), "running")

    await down(time_skipping_env, task_queue, cluster_name, on_b, made_b.placement)
    assert moto.states(EAST_1, on_b) == dict.fromkeys(ids(made_b), "terminated")


async def test_without_names_on_cloud_the_second_plane_adopts_the_first_ones_nodes(
    time_skipping_env: WorkflowEnvironment, task_queue: str, moto: Moto, cluster_name: str,
) -> None:
    """The hazard the names on cloud remove (what orch did before): one tag, one cluster,
    whichever control plane asks."""
    first = await provision(time_skipping_env, task_queue, cluster_name, "")
    second = await provision(time_skipping_env, task_queue, cluster_name, "")

    assert ids(first) == ids(second)
    await down(time_skipping_env, task_queue, cluster_name, "", second.placement)
    assert moto.states(EAST_1, cluster_name) == dict.fromkeys(ids(first), "terminated")
