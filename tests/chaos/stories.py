"""What a chaos story is, and the stories told on the local cloud: what is set up before the
clock starts, the CLI commands the kill lands among, and the end state each must reach.

A story's check looks at what the CLI reports (``orch status``/``queue``/``jobs queue``
with ``--json``, ``orch logs``) and at the cloud itself (through the run's
:class:`World`), and answers :class:`Progress`: done, still on its way (and what it waits
for), or wrong (a state the story can never end in, such as a job FAILED_CONTROLLER).
The AWS stories are in :mod:`tests.chaos.aws_stories`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from orch.managed_jobs import ManagedJobStatus
from orch.runtime.local_processes import marked_pids
from tests.e2e.conftest import Orch

TERMINAL = {status.value for status in ManagedJobStatus if status.is_terminal}


class World(Protocol):
    """A cloud as a chaos lane sees it (:mod:`tests.chaos.local_world`,
    :mod:`tests.chaos.aws_world`)."""

    cloud: str

    def env(self) -> dict[str, str]:
        """What the CLI (and so the worker it starts) needs to reach this cloud."""
        ...

    def around(self, scene: Scene) -> AbstractContextManager[None]:
        """What one run needs around it on this cloud (the AWS twin's machines)."""
        ...

    def nodes(self, cli: Orch) -> dict[str, list[str]]:
        """Name on cloud -> the cluster's nodes that exist now (not those terminated)."""
        ...

    def left_of(self, cli: Orch, cloud_name: str) -> list[str]:
        """Everything of the cluster still on the cloud (nodes and every other resource)."""
        ...

    def leaks(self, cli: Orch, known: set[str]) -> list[str]:
        """Everything on the cloud of a cluster whose name on cloud is not in ``known``."""
        ...


@dataclass(frozen=True)
class Progress:
    state: str  # "done", "waiting" or "wrong"
    detail: str = ""


DONE = Progress("done")


def waiting(detail: str) -> Progress:
    return Progress("waiting", detail)


@dataclass(frozen=True)
class Scene:
    """One run's names (its cluster or managed job, the line its job prints) and cloud."""

    cli: Orch
    name: str
    num_nodes: int
    world: World

    @property
    def marker(self) -> str:
        return f"chaos-ok-{self.name}"

    @property
    def cloud_name(self) -> str:
        return self.cli.cloud_name(self.name)

    def cluster(self, name: str | None = None) -> dict | None:
        wanted = name or self.name
        return next((c for c in self.cli.json("status") if c["name"] == wanted), None)

    def launch_args(self, command: str) -> list[str]:
        return ["launch", "-c", self.name, "--cloud", "local", "--cpus", "1",
                "--num-nodes", str(self.num_nodes), command]


@dataclass(frozen=True)
class Step:
    """A CLI command of a story; ``fails``: it is meant to fail (exit non-zero), so a
    non-zero exit is not retried and a zero one is wrong."""

    args: list[str]
    fails: bool = False


def steps(*commands: list[str]) -> list[Step]:
    return [Step(command) for command in commands]


def _no_commands(scene: Scene) -> list[list[str]]:
    return []


def _no_arrangement(scene: Scene, phase: str) -> None:
    """Local stories need nothing of the cloud beyond its default behaviour."""


def _no_evidence(scene: Scene) -> str:
    return ""


@dataclass(frozen=True)
class Story:
    name: str
    cloud: str  # the world it is told on
    typical_s: float  # how long its commands usually take here: the kill lands inside
    steps: Callable[[Scene], list[Step]]  # the commands the kill lands among
    check: Callable[[Scene], Progress]
    prepare: Callable[[Scene], list[list[str]]] = _no_commands  # before the clock starts
    # Sets the cloud up for a phase ("prepare", then "story"), e.g. regions that fail.
    arrange: Callable[[Scene, str], None] = _no_arrangement
    evidence: Callable[[Scene], str] = _no_evidence  # what to show when it went wrong
    weight: int = field(default=3)  # how often a campaign draws it, against the others


def up_with_output(scene: Scene) -> Progress:
    """UP, a job SUCCEEDED whose output has the marker, and no job FAILED."""
    cluster = scene.cluster()
    if cluster is None or cluster["status"] != "UP":
        return waiting(f"cluster {cluster and cluster['status']}")
    jobs = scene.cli.json("queue", scene.name)
    failed = [j for j in jobs if j["status"].startswith("FAILED")]
    if failed:
        return Progress("wrong", f"job {failed[0]['id']} {failed[0]['status']}")
    succeeded = [j["id"] for j in jobs if j["status"] == "SUCCEEDED"]
    if not succeeded:
        return waiting(f"jobs {[j['status'] for j in jobs]}")
    logs = scene.cli("logs", scene.name, str(succeeded[-1]), "--no-follow", check=False)
    if scene.marker not in logs.stdout:
        return Progress("wrong", f"job {succeeded[-1]} SUCCEEDED without its output")
    return DONE


def gone(scene: Scene) -> Progress:
    """Not listed, and nothing of it left on the cloud."""
    cluster = scene.cluster()
    if cluster is not None:
        return waiting(f"cluster still {cluster['status']}")
    if left := scene.world.left_of(scene.cli, scene.cloud_name):
        return waiting(f"still on the cloud: {', '.join(left)}")
    return DONE


def _up_and_running(scene: Scene) -> Progress:
    """UP after a stop and a start: every node back, each running its processes (Ray)."""
    cluster = scene.cluster()
    if cluster is None or cluster["status"] != "UP":
        return waiting(f"cluster {cluster and cluster['status']}")
    homes = scene.cli.node_homes(scene.name)
    if len(homes) != scene.num_nodes or not all(marked_pids(h) for h in homes):
        return waiting(f"{len(homes)} nodes, not all running")
    return DONE


def _job_succeeded(scene: Scene) -> Progress:
    """Every managed job of this name SUCCEEDED (a retried submit may have made two), with
    its output, and its cluster gone."""
    jobs = [j for j in scene.cli.json("jobs", "queue") if j["name"] == scene.name]
    if not jobs:
        return waiting("no job yet")
    ended = [j for j in jobs if j["status"] in TERMINAL]
    if wrong := [j for j in ended if j["status"] != "SUCCEEDED"]:
        return Progress("wrong", f"job {wrong[0]['id']} {wrong[0]['status']}")
    if len(ended) < len(jobs):
        return waiting(f"jobs {[j['status'] for j in jobs]}")
    for job in jobs:
        if scene.cluster(f"job-{job['id']}-0") is not None:
            return waiting(f"job {job['id']}'s cluster still listed")
        logs = scene.cli("jobs", "logs", str(job["id"]), "--no-follow", check=False)
        if scene.marker not in logs.stdout:
            return Progress("wrong", f"job {job['id']} SUCCEEDED without its output")
    return DONE


def _controller_logs(scene: Scene) -> str:
    """What the controller of each managed job of this name did, when."""
    jobs = [j["id"] for j in scene.cli.json("jobs", "queue") if j["name"] == scene.name]
    return "\n".join(scene.cli("jobs", "logs", str(job), "--controller", check=False).stdout
                     for job in jobs)


def _launched(scene: Scene) -> list[list[str]]:
    return [scene.launch_args("echo up")]


def _local_stories() -> Iterator[Story]:
    yield Story("launch", "local", 14, lambda s: steps(s.launch_args(f"echo {s.marker}")),
                up_with_output)
    yield Story("stop-start", "local", 16,
                lambda s: steps(["stop", "-y", s.name], ["start", "-y", s.name]),
                _up_and_running, prepare=_launched)
    yield Story("down", "local", 6, lambda s: steps(["down", "-y", s.name]), gone,
                prepare=_launched)
    yield Story("managed-job", "local", 25,
                lambda s: steps(["jobs", "launch", "-y", "-d", "-n", s.name, "--cloud",
                                 "local", "--cpus", "1", "--num-nodes", str(s.num_nodes),
                                 f"sleep 3; echo {s.marker}"]),
                _job_succeeded, evidence=_controller_logs)


LOCAL_STORIES = {story.name: story for story in _local_stories()}
