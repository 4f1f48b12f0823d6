"""TeardownWorkflow with its real activities against moto's EC2 (issue 4 on AWS).

Every kind of cluster ends clean (no instance of it left that is not terminated, or not
stopped for a stop) and no teardown raises. Clusters are made with the AWS provider itself,
through the fault front, as a launch would make them.
"""

from __future__ import annotations

import socketserver
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.provision import InstancesRequest, WaitGoneRequest, wait_instances_gone
from orch.clouds.aws import AWSProvider
from orch.clouds.base import ClusterInfo, InstanceStatus, NodeInfo, ProvisionConfig
from orch.clouds.errors import CapacityError
from orch.records import Placement, TeardownInput, TeardownResult
from orch.waiting import WaitProgress
from tests.activities.conftest import EAST_1, INSTANCE_TYPE, Moto, activities_started
from tests.clouds.aws.conftest import PUBLIC_KEY
from tests.clouds.waits import wait_instances
from tests.fakes.ec2_fault_front import EC2FaultFront
from workflows.teardown import TeardownWorkflow

ZONE = f"{EAST_1}c"
PLACEMENT = Placement(cloud="aws", region=EAST_1, zone=ZONE, instance_type=INSTANCE_TYPE)


def launch(cluster_name: str, num_nodes: int = 2) -> list[str]:
    """Make the cluster as a launch would; returns its instance ids, head first."""
    provider = AWSProvider(poll_interval=0.05)
    provider.run_instances(ProvisionConfig(
        cluster_name=cluster_name, num_nodes=num_nodes, region=EAST_1, zone=ZONE,
        instance_type=INSTANCE_TYPE, disk_size=32, ssh_public_key=PUBLIC_KEY,
        idempotency_token=f"launch/{uuid.uuid4().hex}"))
    wait_instances(provider, EAST_1, cluster_name, InstanceStatus.RUNNING)
    return [n.instance_id for n in provider.get_cluster_info(EAST_1, cluster_name).nodes]


async def teardown(env: WorkflowEnvironment, task_queue: str, request: TeardownInput
                   ) -> tuple[TeardownResult, list[str]]:
    """The teardown's result, and the activities it ran in order."""
    handle = await env.client.start_workflow(
        TeardownWorkflow.run, request, id=f"teardown/{uuid.uuid4().hex[:12]}",
        task_queue=task_queue)
    result = await handle.result()
    return result, [name for name, _ in await activities_started(handle)]


TERMINATE = ["terminate_instances", "wait_instances_gone", "cleanup_ports"]


def assert_gone(moto: Moto, cluster_name: str, made: list[str]) -> None:
    """Every instance ever made for the cluster is terminated, and moto knows no other."""
    assert moto.states(EAST_1, cluster_name) == dict.fromkeys(made, "terminated")


async def test_an_up_cluster_is_terminated_and_a_second_teardown_finds_nothing(
    time_skipping_env: WorkflowEnvironment, task_queue: str, moto: Moto, cluster_name: str,
) -> None:
    made = launch(cluster_name)
    request = TeardownInput(cluster_name=cluster_name, placement=PLACEMENT)

    result, ran = await teardown(time_skipping_env, task_queue, request)

    assert ran == TERMINATE  # no nodes recorded: no ray stop
    assert sorted(result.instances) == sorted(made)
    assert result.message == f"Cluster {cluster_name}: 2 instance(s) terminated."
    assert result.warnings == []
    assert_gone(moto, cluster_name, made)
    ec2 = moto.ec2(EAST_1)
    assert ec2.describe_security_groups(Filters=[  # ports cleaned up
        {"Name": "group-name", "Values": [f"orch-{cluster_name}"]}])["SecurityGroups"] == []
    assert ec2.describe_key_pairs(Filters=[
        {"Name": "tag:orch-cluster", "Values": [cluster_name]}])["KeyPairs"] == []

    again, _ = await teardown(time_skipping_env, task_queue, request)
    assert again.instances == [] and "no instances" in again.message
    assert_gone(moto, cluster_name, made)


async def test_a_stopped_cluster_is_terminated(
    time_skipping_env: WorkflowEnvironment, task_queue: str, moto: Moto, cluster_name: str,
) -> None:
    made = launch(cluster_name)
    AWSProvider().stop_instances(EAST_1, cluster_name)
    assert set(moto.states(EAST_1, cluster_name).values()) == {"stopped"}

    result, _ = await teardown(time_skipping_env, task_queue,
                               TeardownInput(cluster_name=cluster_name, placement=PLACEMENT))

    assert sorted(result.instances) == sorted(made)
    assert_gone(moto, cluster_name, made)


async def test_a_recorded_cluster_without_instances_is_a_clean_no_op(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    result, _ = await teardown(time_skipping_env, task_queue,
                               TeardownInput(cluster_name=cluster_name, placement=PLACEMENT))

    assert result.instances == []
    assert result.message == f"Cluster {cluster_name} had no instances on aws: nothing to do."
    assert moto.states(EAST_1, cluster_name) == {}
    assert aws_env.calls("TerminateInstances") == []


async def test_a_half_provisioned_cluster_is_found_by_its_tags(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    # The launch died after the head: the record has a placement but no nodes.
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity", skip=1)
    with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
        launch(cluster_name)
    aws_env.reset()
    (head,) = moto.states(EAST_1, cluster_name)

    result, _ = await teardown(time_skipping_env, task_queue,
                               TeardownInput(cluster_name=cluster_name, placement=PLACEMENT))

    assert result.instances == [head]
    assert_gone(moto, cluster_name, [head])


async def test_a_cluster_that_never_existed_calls_no_cloud(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    result, ran = await teardown(time_skipping_env, task_queue,
                                 TeardownInput(cluster_name=cluster_name, placement=None))

    assert result.message == f"Cluster {cluster_name} was never provisioned: nothing to tear down."
    assert result.instances == [] and ran == []
    assert aws_env.calls() == []
    assert moto.states(EAST_1, cluster_name) == {}


class RefusingHead(socketserver.ThreadingTCPServer):
    """A head that refuses SSH: it accepts each connection and hangs up before any banner."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), socketserver.BaseRequestHandler)
        self.connections = 0

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1  # the server closes the connection after this


@pytest.fixture
def refusing_head() -> Iterator[RefusingHead]:
    with RefusingHead() as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server
        server.shutdown()
        thread.join()


async def test_a_head_that_refuses_ssh_does_not_stop_the_teardown(
    time_skipping_env: WorkflowEnvironment, task_queue: str, moto: Moto, cluster_name: str,
    refusing_head: RefusingHead,
) -> None:
    made = launch(cluster_name, num_nodes=1)
    head = NodeInfo(instance_id=made[0], internal_ip="127.0.0.1", is_head=True, runner="ssh",
                    ssh_user="ubuntu", ssh_port=refusing_head.server_address[1])
    info = ClusterInfo(cloud="aws", region=EAST_1, zone=ZONE, instance_type=INSTANCE_TYPE,
                       nodes=[head])

    result, ran = await teardown(time_skipping_env, task_queue, TeardownInput(
        cluster_name=cluster_name, placement=PLACEMENT, info=info))

    assert ran == ["stop_ray", *TERMINATE]  # ray stop tried the head, gave up, went on
    assert refusing_head.connections > 0
    (warning,) = result.warnings
    assert warning.startswith(f"ray stop skipped on {made[0]}: unreachable")
    assert result.instances == made
    assert_gone(moto, cluster_name, made)


# -- stop, and query until stopped --------------------------------------------------------

async def test_stop_waits_for_instances_that_take_several_polls_to_stop(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    made = launch(cluster_name)
    aws_env.hold_state("stopping", polls=3)

    result, ran = await teardown(time_skipping_env, task_queue, TeardownInput(
        cluster_name=cluster_name, placement=PLACEMENT, terminate=False))

    assert ran == ["stop_instances", "wait_instances_gone"]  # a stopped cluster keeps its ports
    assert sorted(result.instances) == sorted(made)
    assert result.message == f"Cluster {cluster_name}: 2 instance(s) stopped."
    assert moto.states(EAST_1, cluster_name) == dict.fromkeys(made, "stopped")
    # After StopInstances, the wait polls: three times "stopping", then "stopped".
    looks = [c for c in aws_env.calls() if c.action in ("DescribeInstances", "StopInstances")]
    after_stop = looks[[c.action for c in looks].index("StopInstances") + 1:]
    assert len(after_stop) == 4


async def test_the_wait_for_stopped_is_bounded_and_names_what_is_in_the_way(
    aws_env: EC2FaultFront, moto: Moto, cluster_name: str,
) -> None:
    # The activity itself: TeardownInput has no say in the wait's bound (600 s).
    made = launch(cluster_name, num_nodes=1)
    AWSProvider().stop_instances(EAST_1, cluster_name)
    aws_env.hold_state("stopping", polls=1_000_000)
    request = WaitGoneRequest(
        instances=InstancesRequest(cloud="aws", region=EAST_1, cluster_name=cluster_name),
        target=InstanceStatus.STOPPED, timeout_s=0.5)
    heartbeats: list[tuple[object, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.append(details)

    with pytest.raises(ApplicationError) as failure:
        env.run(wait_instances_gone, request)

    assert failure.value.type == "TransientError"
    assert failure.value.message == (f"gave up after 0.5 s waiting for {cluster_name} STOPPED "
                                     f"in {EAST_1}: last seen {made[0]}=STOPPING")
    progress = WaitProgress.model_validate(heartbeats[-1][0])  # alive, and waiting on
    assert progress.what == f"{cluster_name} STOPPED in {EAST_1}" and progress.polls >= 1
    assert progress.last_seen == f"{made[0]}=STOPPING"
    assert moto.states(EAST_1, cluster_name) == {made[0]: "stopped"}
