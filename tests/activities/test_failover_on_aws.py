"""FailoverWorkflow with its real activities against moto's EC2 (issue 3's AWS failover).

Each test arranges faults in the EC2 fault front, runs the workflow on the time-skipping
server, and checks both the workflow's account (result, attempt history, failure details)
and what really exists in moto.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orch.clouds.aws import AWSProvider
from orch.clouds.local import LocalProvider
from orch.failover_rules import BlockEntry
from orch.spec import Resources, Task
from tests.activities.conftest import EAST_1, EAST_2, INSTANCE_TYPE, Moto, activities_started
from tests.fakes.ec2_fault_front import EC2FaultFront
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow

SPOT_STANDARD = "L-34B43A08"  # the spot vCPU quota of m6id's family (standard)


def pinned(region: str, num_nodes: int = 2) -> Task:
    return Task(name="train", num_nodes=num_nodes, resources=Resources(
        cloud="aws", region=region, instance_type=INSTANCE_TYPE))


async def start(env: WorkflowEnvironment, task_queue: str, request: FailoverInput
                ) -> WorkflowHandle[Any, FailoverOutput]:
    return await env.client.start_workflow(
        FailoverWorkflow.run, request, id=f"failover/{uuid.uuid4().hex[:12]}",
        task_queue=task_queue)


async def failover(env: WorkflowEnvironment, task_queue: str, request: FailoverInput
                   ) -> FailoverOutput:
    return await (await start(env, task_queue, request)).result()


def run_zones(front: EC2FaultFront) -> list[tuple[str | None, str]]:
    """(zone, outcome) of every RunInstances the front saw, in order."""
    return [(c.zone, c.outcome) for c in front.calls("RunInstances")]


async def test_no_capacity_in_zone_a_moves_to_zone_b(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity", zone=f"{EAST_1}a")

    output = await failover(time_skipping_env, task_queue,
                            FailoverInput(cluster_name=cluster_name, task=pinned(EAST_1)))

    assert (output.placement.region, output.placement.zone) == (EAST_1, f"{EAST_1}b")
    (attempt,) = output.history
    assert (attempt.zone, attempt.error_type, attempt.code) == (
        f"{EAST_1}a", "CapacityError", "InsufficientInstanceCapacity")
    assert attempt.block == BlockEntry(cloud="aws", region=EAST_1, zone=f"{EAST_1}a",
                                       instance_type=INSTANCE_TYPE, use_spot=False,
                                       reason="CapacityError")
    instances = moto.instances(EAST_1, cluster_name)
    assert len(instances) == 2
    assert {i["Placement"]["AvailabilityZone"] for i in instances} == {f"{EAST_1}b"}
    assert {i["State"]["Name"] for i in instances} == {"running"}
    assert sorted(n.instance_id for n in output.info.nodes) == sorted(
        i["InstanceId"] for i in instances)
    assert output.info.nodes[0].is_head


async def test_a_zero_quota_moves_to_the_next_region_without_launching(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    # Spot in us-east-1 is preferred, on-demand in us-east-2 is the fallback. The front's
    # quotas hold for every region, so the two places are told apart by their quota: the
    # standard family's spot vCPU quota is 0, its on-demand quota is not answerable.
    aws_env.set_quota(SPOT_STANDARD, 0)
    task = Task(name="train", num_nodes=2, resources=Resources(
        cloud="aws", instance_type=INSTANCE_TYPE,
        ordered=[Resources(region=EAST_1, use_spot=True), Resources(region=EAST_2)]))

    output = await failover(time_skipping_env, task_queue,
                            FailoverInput(cluster_name=cluster_name, task=task))

    (attempt,) = output.history
    assert (attempt.candidate.region, attempt.error_type, attempt.code) == (
        EAST_1, "QuotaError", "VcpuLimitExceeded")
    assert attempt.block == BlockEntry(cloud="aws", region=EAST_1, reason="QuotaError")
    assert output.placement.region == EAST_2 and not output.placement.use_spot
    assert all(zone and zone.startswith(EAST_2) for zone, _ in run_zones(aws_env))
    assert moto.instances(EAST_1, cluster_name) == []
    assert len(moto.instances(EAST_2, cluster_name, ("running",))) == 2


# Every call the AWS provider makes, each answered as its service answers bad credentials.
_EC2_ACTIONS = (
    "DescribeInstanceTypes", "DescribeInstances", "DescribeImages", "DescribeSecurityGroups",
    "DescribeVpcs", "DescribeSubnets", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress",
    "DeleteSecurityGroup", "ImportKeyPair", "DescribeKeyPairs", "DeleteKeyPair",
    "RunInstances", "StartInstances", "StopInstances", "TerminateInstances",
)


def reject_every_call(front: EC2FaultFront) -> None:
    for action in _EC2_ACTIONS:
        front.fail(action, "AuthFailure")
    front.fail("GetServiceQuota", "UnrecognizedClientException", status=400,
               message="The security token included in the request is invalid.")
    front.fail("GetCallerIdentity", "InvalidClientTokenId")


async def test_bad_credentials_move_to_the_next_cloud(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    reject_every_call(aws_env)
    task = Task(name="train", num_nodes=1, resources=Resources(ordered=[
        Resources(cloud="aws", region=EAST_1, instance_type=INSTANCE_TYPE),
        Resources(cloud="local")]))

    try:
        output = await failover(time_skipping_env, task_queue,
                                FailoverInput(cluster_name=cluster_name, task=task))
        (attempt,) = output.history
        assert (attempt.candidate.cloud, attempt.error_type, attempt.code) == (
            "aws", "AuthError", "AuthFailure")
        assert attempt.block == BlockEntry(cloud="aws", reason="AuthError")
        assert output.placement.cloud == "local"
        assert [n.runner for n in output.info.nodes] == ["local"]
        assert run_zones(aws_env) == []
        assert moto.instances(EAST_1, cluster_name) == []
    finally:
        local = LocalProvider()
        local.terminate_instances("local", cluster_name)
        assert local.query_instances("local", cluster_name) == {}


async def test_a_failed_worker_gets_the_head_terminated_before_the_next_zone(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    # The head's RunInstances goes through; the worker's finds no capacity in zone a.
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity", zone=f"{EAST_1}a", skip=1)

    handle = await start(time_skipping_env, task_queue,
                         FailoverInput(cluster_name=cluster_name, task=pinned(EAST_1)))
    output = await handle.result()

    assert output.placement.zone == f"{EAST_1}b"
    assert [a.zone for a in output.history] == [f"{EAST_1}a"]
    by_zone: dict[str, list[str]] = {}
    for instance in moto.instances(EAST_1, cluster_name, ("running", "terminated")):
        by_zone.setdefault(instance["Placement"]["AvailabilityZone"], []).append(
            instance["State"]["Name"])
    assert by_zone == {f"{EAST_1}a": ["terminated"], f"{EAST_1}b": ["running", "running"]}
    # The head was terminated, and confirmed gone, before zone b was tried.
    assert [name for name, _ in await activities_started(handle)] == [
        "plan_candidates", "check_quota", "run_instances",  # zone a: the worker fails
        "terminate_instances", "wait_instances_gone",
        "check_quota", "run_instances", "wait_running", "get_cluster_info",  # zone b
    ]
    in_a, in_b = (f"{EAST_1}a", "moto"), (f"{EAST_1}b", "moto")
    assert run_zones(aws_env) == [in_a, (f"{EAST_1}a", "InsufficientInstanceCapacity"),
                                  (f"{EAST_1}a", "InsufficientInstanceCapacity"), in_b, in_b]


async def test_a_stopped_cluster_is_resumed_where_it_lives(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    first = await failover(time_skipping_env, task_queue,
                           FailoverInput(cluster_name=cluster_name, task=pinned(EAST_1)))
    AWSProvider().stop_instances(EAST_1, cluster_name)
    assert set(moto.states(EAST_1, cluster_name).values()) == {"stopped"}
    aws_env.reset()

    again = await failover(time_skipping_env, task_queue, FailoverInput(
        cluster_name=cluster_name, task=pinned(EAST_1), placement=first.placement,
        was_up=True))

    assert again.placement == first.placement
    assert [n.instance_id for n in again.info.nodes] == [n.instance_id for n in first.info.nodes]
    assert again.history == []
    assert set(moto.states(EAST_1, cluster_name).values()) == {"running"}
    assert run_zones(aws_env) == []
    assert len(aws_env.calls("StartInstances")) == 1


async def test_a_retried_launch_whose_answer_was_lost_makes_no_duplicate(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    # RunInstances takes effect but both of botocore's tries lose their answer, so the
    # activity fails and Temporal retries it. DescribeInstances does not list the new
    # instance yet (eventual consistency: the two looks of each try see nothing), so the
    # retry launches node 0 again, with the same ClientToken, and EC2 replays the answer.
    aws_env.fail("RunInstances", "InternalError", after_forward=True, times=2)
    aws_env.hide_instances(polls=4)

    handle = await start(time_skipping_env, task_queue, FailoverInput(
        cluster_name=cluster_name, task=pinned(EAST_1, num_nodes=1)))
    output = await handle.result()

    (instance,) = moto.instances(EAST_1, cluster_name)
    assert instance["State"]["Name"] == "running"
    assert [n.instance_id for n in output.info.nodes] == [instance["InstanceId"]]
    assert [outcome for _, outcome in run_zones(aws_env)] == [
        "InternalError", "InternalError", "replayed"]
    tokens = {c.client_token for c in aws_env.calls("RunInstances")}
    assert len(tokens) == 1 and None not in tokens
    assert output.history == []  # a transient fault is retried in place, not failed over
    assert ("run_instances", 2) in await activities_started(handle)


async def test_nothing_anywhere_fails_with_every_attempt(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    aws_env.fail("RunInstances", "InsufficientInstanceCapacity")  # every zone

    with pytest.raises(WorkflowFailureError) as failure:
        await failover(time_skipping_env, task_queue,
                       FailoverInput(cluster_name=cluster_name, task=pinned(EAST_2)))

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "NoResourcesError"
    attempts = cause.details[0]["attempts"]
    assert [(a["zone"], a["error_type"], a["code"]) for a in attempts] == [
        (f"{EAST_2}{z}", "CapacityError", "InsufficientInstanceCapacity") for z in "abc"]
    assert [a["block"]["zone"] for a in attempts] == [f"{EAST_2}{z}" for z in "abc"]
    assert {z for z, _ in run_zones(aws_env)} == {f"{EAST_2}{z}" for z in "abc"}
    assert moto.instances(EAST_2, cluster_name) == []
    assert AWSProvider().query_instances(EAST_2, cluster_name) == {}


async def test_each_ordered_choice_launches_with_its_own_labels_and_disk(
    time_skipping_env: WorkflowEnvironment, task_queue: str, aws_env: EC2FaultFront,
    moto: Moto, cluster_name: str,
) -> None:
    """The second ``ordered`` choice, reached by failover, boots with its own labels and
    disk tier, not the first choice's (Candidate.alternative)."""
    for zone in "abcdef":
        aws_env.fail("RunInstances", "InsufficientInstanceCapacity", zone=f"{EAST_1}{zone}")
    task = Task.model_validate({"name": "train", "num_nodes": 1, "resources": {
        "cloud": "aws", "instance_type": INSTANCE_TYPE, "ordered": [
            {"region": EAST_1, "labels": {"choice": "first"}, "disk_tier": "high"},
            {"region": EAST_2, "labels": {"choice": "second"}, "disk_tier": "low"}]}})

    output = await failover(time_skipping_env, task_queue,
                            FailoverInput(cluster_name=cluster_name, task=task))

    assert output.placement.region == EAST_2
    (instance,) = moto.instances(EAST_2, cluster_name)
    assert {t["Key"]: t["Value"] for t in instance["Tags"]}["choice"] == "second"
    volumes = moto.ec2(EAST_2).describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance["InstanceId"]]}])
    assert [v["VolumeType"] for v in volumes["Volumes"]] == ["standard"]
