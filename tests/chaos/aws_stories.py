"""The stories a chaos run tells on AWS (moto, the fault front, the twin: see
:mod:`tests.chaos.aws_world`). Each launches from a task of ``ordered`` choices, the other
region first, then the home region where the twin runs machines:

* ``aws-failover``: the other region has no capacity (with 2 nodes, each of its zones
  makes the head and then fails the worker, so the failover must remove a head and the
  security group and key pair of the region); the launch ends in the home region and its
  job runs. Kills land among the failed attempts, their cleanups and the launch.
* ``aws-nowhere``: no region has capacity; the launch fails (as it should), then
  ``orch down``; nothing of the cluster may be left in either region.
* ``aws-stop-start``: a cluster that failed over is stopped and started once capacity
  is back in the region it first tried: it must start where its disks are, not there.
* ``aws-down``: a cluster in the home region is torn down.

A managed job is not told on AWS: the twin hosts one cluster whose name is known before
it starts, and a job's cluster name (``job-<id>-<n>``) is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import yaml

from tests.chaos.aws_world import HOME_REGION, INSTANCE_TYPE, OTHER_REGION, REGIONS, AwsWorld
from tests.chaos.stories import (
    DONE,
    Progress,
    Scene,
    Step,
    Story,
    gone,
    steps,
    up_with_output,
    waiting,
)

WEIGHT = 1  # an AWS run costs about three local ones


def _world(scene: Scene) -> AwsWorld:
    return cast(AwsWorld, scene.world)


def _launch(scene: Scene, command: str) -> list[str]:
    """``orch launch`` of a task trying the other region first, then the home region."""
    task = {"name": scene.name, "num_nodes": scene.num_nodes, "run": command,
            "resources": {"ordered": [{"infra": f"aws/{region}", "instance_type": INSTANCE_TYPE}
                                      for region in REGIONS]}}
    path = scene.cli.home / "tasks" / f"{scene.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(task))
    return ["launch", "-y", "-c", scene.name, str(path)]


def _at_home(scene: Scene) -> Progress | None:
    """Wrong when the cluster has instances outside the home region; waiting until it has
    its nodes, all running, there; None when it does."""
    world = _world(scene)
    if strays := world.instances_in(OTHER_REGION, scene.cloud_name):
        return Progress("wrong", f"instances in {OTHER_REGION}: {strays}")
    home = world.instances_in(HOME_REGION, scene.cloud_name)
    if len(home) != scene.num_nodes or set(home.values()) != {"running"}:
        return waiting(f"instances in {HOME_REGION}: {home}")
    return None


def _failed_over(scene: Scene) -> Progress:
    cluster = scene.cluster()
    if cluster is not None and cluster["region"] != HOME_REGION:
        return Progress("wrong", f"cluster in {cluster['region']}")
    return _at_home(scene) or up_with_output(scene)


def _started_at_home(scene: Scene) -> Progress:
    """UP in the home region on its own instances, and running jobs again (Ray is back)."""
    cluster = scene.cluster()
    if cluster is None or cluster["status"] != "UP":
        return waiting(f"cluster {cluster and cluster['status']}")
    if problem := _at_home(scene):
        return problem
    ran = scene.cli("exec", scene.name, f"echo {scene.marker}", check=False)
    if ran.returncode != 0 or scene.marker not in ran.stdout:
        return waiting(f"orch exec exited {ran.returncode}")
    return DONE


def _other_region_fails(scene: Scene, phase: str) -> None:
    if phase == "story":
        _world(scene).fail_region(OTHER_REGION, heads_launch=scene.num_nodes > 1)


def _no_region_has_capacity(scene: Scene, phase: str) -> None:
    if phase == "story":
        for region in REGIONS:
            _world(scene).fail_region(region, heads_launch=scene.num_nodes > 1)


def _capacity_comes_back(scene: Scene, phase: str) -> None:
    """The launch fails over (quickly: no head is made); then the other region has
    capacity again, for the start to be tempted by."""
    if phase == "prepare":
        _world(scene).fail_region(OTHER_REGION, heads_launch=False)
    else:
        _world(scene).normal()


def _in_home_region(scene: Scene) -> list[list[str]]:
    return [["launch", "-y", "-c", scene.name, "--infra", f"aws/{HOME_REGION}",
             "-t", INSTANCE_TYPE, "--num-nodes", str(scene.num_nodes), "echo up"]]


def _aws_stories() -> Iterator[Story]:
    yield Story("aws-failover", "aws", 60,
                lambda s: steps(_launch(s, f"echo {s.marker}")), _failed_over,
                arrange=_other_region_fails, weight=WEIGHT)
    yield Story("aws-nowhere", "aws", 40,
                lambda s: [Step(_launch(s, "echo never"), fails=True),
                           Step(["down", "-y", s.name])],
                gone, arrange=_no_region_has_capacity, weight=WEIGHT)
    yield Story("aws-stop-start", "aws", 30,
                lambda s: steps(["stop", "-y", s.name], ["start", "-y", s.name]),
                _started_at_home, prepare=lambda s: [_launch(s, "echo up")],
                arrange=_capacity_comes_back, weight=WEIGHT)
    yield Story("aws-down", "aws", 15, lambda s: steps(["down", "-y", s.name]), gone,
                prepare=_in_home_region, weight=WEIGHT)


AWS_STORIES = {story.name: story for story in _aws_stories()}
