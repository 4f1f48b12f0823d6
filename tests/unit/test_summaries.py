"""The words the Web UI shows for orch's workflows and activities (orch.summaries)."""

from __future__ import annotations

from datetime import UTC, datetime

from orch.clouds.base import ClusterInfo, NodeInfo, ProvisionConfig
from orch.clouds.errors import BlockScope
from orch.failover_rules import Candidate, record_failure
from orch.managed_jobs import EventKind, ManagedJobStatus, ScheduleState, new_state
from orch.records import ClusterRecord, Placement
from orch.spec import Resources, Task
from orch.status import ClusterStatus
from orch.summaries import (
    attempt_line,
    attempt_phrase,
    cluster_details,
    job_details,
    job_summary,
    launch_summary,
    pipeline_details,
    provision_call,
    resources_phrase,
    short,
    task_details,
    teardown_summary,
    where,
)

TRAIN = Task(name="train", num_nodes=2, resources=Resources(
    cloud="aws", region="us-east-1", accelerators={"A100": 8}, use_spot=True))
NODES = ClusterInfo(cloud="aws", region="us-east-1", nodes=[
    NodeInfo(instance_id=f"i-{n}", internal_ip=f"10.0.0.{n}", is_head=n == 1)
    for n in range(1, 5)])


def test_resources_read_like_the_issue_s_examples() -> None:
    assert resources_phrase(TRAIN) == "2× A100:8 on aws us-east-1 (spot)"
    assert resources_phrase(Task()) == "1× CPU nodes on any cloud"
    assert resources_phrase(Task(resources=Resources(instance_type="m6i.xlarge"))) == (
        "1× m6i.xlarge on any cloud")
    choices = Task(resources=Resources(any_of=[Resources(cloud="gcp", accelerators={"L4": 1}),
                                               Resources(cloud="aws"), Resources(cloud="azure")]))
    assert resources_phrase(choices) == "1× L4:1 on gcp, or 2 other choices"


def test_where_names_the_zone_else_the_region_and_never_the_local_cloud_twice() -> None:
    assert where("aws", "us-east-1", "us-east-1b") == "aws us-east-1b"
    assert where("aws", "us-east-1") == "aws us-east-1"
    assert where("local", "local") == "local"
    assert where(None) == "any cloud"


def test_workflow_summaries() -> None:
    assert launch_summary("train", TRAIN) == "launch train: 2× A100:8 on aws us-east-1 (spot)"
    assert launch_summary("train", TRAIN, NODES) == "launch train: set up again on its 4 node(s)"
    assert launch_summary("job-7-1", TRAIN, purpose='managed job 7 "train", task 2/3') == (
        'launch job-7-1 for managed job 7 "train", task 2/3: 2× A100:8 on aws us-east-1 (spot)')
    placement = Placement(cloud="aws", region="us-east-1")
    assert teardown_summary("hello", placement, NODES, terminate=True) == (
        "teardown hello: 4 instances in aws us-east-1")
    assert teardown_summary("hello", placement, None, terminate=False) == (
        "stop hello: its instances in aws us-east-1")
    assert teardown_summary("hello", None, None, terminate=True) == (
        "teardown hello: never provisioned")
    assert job_summary(7, "train", [TRAIN]) == (
        'managed job 7 "train": 2× A100:8 on aws us-east-1 (spot)')
    assert job_summary(7, None, [TRAIN, Task(), Task()]) == 'managed job 7 "-": 3 tasks'


def test_details_say_what_was_asked_and_by_whom() -> None:
    details = task_details(TRAIN, "alice@laptop")
    assert "**Resources:** 2× A100:8 on aws us-east-1 (spot)" in details
    assert "**Launched by:** alice@laptop" in details and "**Task:** train" in details
    pipeline = pipeline_details([TRAIN, Task(name="eval")], "bob@ci")
    assert "**Task 1/2 (train):** 2× A100:8" in pipeline
    assert "**Task 2/2 (eval):** 1× CPU nodes on any cloud" in pipeline
    assert pipeline.endswith("**Launched by:** bob@ci")


def test_cluster_details_follow_the_record() -> None:
    record = ClusterRecord(name="hello", status=ClusterStatus.UP, num_nodes=2,
                           placement=Placement(cloud="aws", region="us-east-1",
                                               zone="us-east-1b", instance_type="m6i.xlarge"))
    assert cluster_details(record) == (
        "**Status:** UP\n\n**Nodes:** 2× m6i.xlarge on aws us-east-1b\n\n"
        "**Now:** idle, waiting for jobs or operations")
    record.status, record.step, record.last_error = ClusterStatus.INIT, "running setup", "boom"
    assert "**Now:** running setup" in cluster_details(record)
    assert "**Last error:** boom" in cluster_details(record)


def test_activity_summaries_use_the_cloud_s_own_calls() -> None:
    config = ProvisionConfig(cluster_name="hello", num_nodes=2, region="us-east-1",
                             zone="us-east-1b", instance_type="m6i.xlarge")
    assert provision_call("create", config, "aws") == "RunInstances m6i.xlarge ×2 in us-east-1b"
    assert provision_call("create", config, "gcp").startswith("instances.insert m6i.xlarge")
    local = ProvisionConfig(cluster_name="hello", num_nodes=1, region="local", cpus=2)
    assert provision_call("create", local, "local") == "start sandboxes 2 CPU ×1 in local"


def test_a_failed_attempt_in_one_phrase() -> None:
    candidate = Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"],
                          instance_type="p4d.24xlarge")
    attempt = record_failure(candidate, "us-east-1a", "CapacityError",
                             "InsufficientInstanceCapacity", "no capacity", BlockScope.ZONE)
    assert attempt_phrase(attempt) == (
        "CapacityError InsufficientInstanceCapacity in aws us-east-1a (p4d.24xlarge)")


def test_a_failed_attempt_on_one_line_with_its_message_cut_at_a_word() -> None:
    candidate = Candidate(cloud="aws", region="us-east-1", zones=["us-east-1a"],
                          instance_type="p4d.24xlarge", use_spot=True)
    message = ("We currently do not have sufficient p4d.24xlarge capacity in the Availability "
               "Zone you requested (us-east-1a). Our system will be working on provisioning\n"
               "additional capacity.")
    attempt = record_failure(candidate, "us-east-1a", "CapacityError",
                             "InsufficientInstanceCapacity", message, BlockScope.ZONE)
    line = attempt_line(attempt)
    assert "\n" not in line
    assert line.startswith("aws us-east-1/us-east-1a p4d.24xlarge spot: CapacityError "
                           "InsufficientInstanceCapacity: We currently do not have")
    assert line.endswith("Zone you requested…; blocked aws zone us-east-1a (p4d.24xlarge spot)")
    retried = record_failure(candidate, None, "TransientError", "", "", BlockScope.NONE)
    assert attempt_line(retried) == ("aws us-east-1 p4d.24xlarge spot: TransientError; "
                                     "blocked nothing (retry)")


def test_job_details_name_the_task_its_cluster_and_the_last_step() -> None:
    state = new_state(7, "train", [TRAIN, Task(name="eval")], datetime(2026, 1, 1, tzinfo=UTC))
    state.status, state.schedule_state = ManagedJobStatus.RUNNING, ScheduleState.ALIVE
    run = state.current
    run.placement = Placement(cloud="aws", region="us-east-1", instance_type="p4d.24xlarge")
    run.info, run.recoveries = NODES, 1
    state.record(datetime(2026, 1, 1, tzinfo=UTC), EventKind.RUNNING, "job 1 running", 0)
    assert job_details(state) == (
        '**Status:** RUNNING (ALIVE)\n\n**Task:** 1/2 "train"\n\n'
        "**Cluster:** job-7-0, 4× p4d.24xlarge on aws us-east-1\n\n"
        "**Recoveries:** 1\n\n**Last step:** job 1 running")


def test_long_messages_are_cut_at_a_word() -> None:
    assert short("CapacityError: no capacity in us-east-1a today", 30) == (
        "CapacityError: no capacity in…")
    assert short("fits", 30) == "fits"
