"""A start or relaunch plans only where the cluster lives (activities/plan.py), even when
its task lists ``ordered``/``any_of`` choices that each name their own place.

Found by the chaos harness's AWS stop/start story: a cluster launched from
``ordered: [aws/us-east-2, aws/us-east-1]`` that had failed over to us-east-1 was started
by trying us-east-2 again, where a start with capacity would have made new instances
beside the stopped ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities import plan as plan_activity
from orch.contracts.plan import PlanRequest
from orch.records import Placement
from orch.spec import Task

EAST_2_THEN_1 = Task.model_validate({"num_nodes": 2, "resources": {"ordered": [
    {"infra": "aws/us-east-2", "instance_type": "m6id.large"},
    {"infra": "aws/us-east-1", "instance_type": "m6id.large"}]}})
IN_EAST_1 = Placement(cloud="aws", region="us-east-1", zone="us-east-1a",
                      instance_type="m6id.large")


@pytest.fixture(autouse=True)
def aws_enabled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """AWS usable, and no config file (the defaults)."""
    monkeypatch.setattr(plan_activity, "enabled_clouds", lambda: ("aws",))
    monkeypatch.delenv("ORCH_CONFIG", raising=False)
    monkeypatch.setenv("ORCH_HOME", str(tmp_path))


def test_a_start_of_a_cluster_that_failed_over_plans_only_its_own_zone() -> None:
    found = plan_activity.plan_candidates(PlanRequest(task=EAST_2_THEN_1, placement=IN_EAST_1))

    assert [(c.region, list(c.zones)) for c in found] == [("us-east-1", ["us-east-1a"])]


def test_without_a_placement_the_ordered_choices_keep_their_order() -> None:
    found = plan_activity.plan_candidates(PlanRequest(task=EAST_2_THEN_1))

    assert [c.region for c in found] == ["us-east-2", "us-east-1"]


def test_several_choices_in_the_cluster_s_region_stay_choices_there() -> None:
    task = Task.model_validate({"resources": {"cloud": "aws", "any_of": [
        {"region": "us-east-1", "instance_type": "m6id.large"},
        {"region": "us-east-1", "instance_type": "m6i.large"},
        {"region": "us-west-2", "instance_type": "m6i.large"}]}})

    pinned = plan_activity.pinned_to(task, IN_EAST_1).resources.alternatives()

    assert [(r.region, r.zone, r.instance_type) for r in pinned] == [
        ("us-east-1", "us-east-1a", "m6id.large"), ("us-east-1", "us-east-1a", "m6i.large")]


def test_a_task_without_choices_is_pinned_as_before() -> None:
    task = Task.model_validate({"resources": {"cloud": "aws", "instance_type": "m6id.large"}})

    pinned = plan_activity.pinned_to(task, IN_EAST_1).resources

    assert (pinned.cloud, pinned.region, pinned.zone, pinned.instance_type) == (
        "aws", "us-east-1", "us-east-1a", "m6id.large")
