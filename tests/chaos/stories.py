"""The stories a chaos run tells on the local cloud: what is set up before the clock starts,
the CLI commands the kill lands among, and the end state each must reach afterwards.

A story's check looks at what the CLI reports (``orch status``/``queue``/``jobs queue``
with ``--json``, ``orch logs``) and at the local cloud's sandboxes, and answers
:class:`Progress`: done, still on its way (and what it waits for), or wrong (a state the
story can never end in, such as a job FAILED_CONTROLLER).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orch.managed_jobs import ManagedJobStatus
from orch.runtime.local_processes import marked_pids
from tests.e2e.conftest import Orch

TERMINAL = {status.value for status in ManagedJobStatus if status.is_terminal}


@dataclass(frozen=True)
class Progress:
    state: str  # "done", "waiting" or "wrong"
    detail: str = ""


DONE = Progress("done")


def waiting(detail: str) -> Progress:
    return Progress("waiting", detail)


@dataclass(frozen=True)
class Scene:
    """One run's names: its cluster (or managed job) and the line its job prints."""

    cli: Orch
    name: str
    num_nodes: int

    @property
    def marker(self) -> str:
        return f"chaos-ok-{self.name}"

    def cluster(self, name: str | None = None) -> dict | None:
        wanted = name or self.name
        return next((c for c in self.cli.json("status") if c["name"] == wanted), None)

    def launch_args(self, command: str) -> list[str]:
        return ["launch", "-c", self.name, "--cloud", "local", "--cpus", "1",
                "--num-nodes", str(self.num_nodes), command]


@dataclass(frozen=True)
class Story:
    name: str
    typical_s: float  # how long its commands usually take here: the kill lands inside
    prepare: Callable[[Scene], list[list[str]]]  # run before the clock starts
    steps: Callable[[Scene], list[list[str]]]  # the commands the kill lands among
    check: Callable[[Scene], Progress]
    evidence: Callable[[Scene], str] = lambda scene: ""  # what to show when it went wrong


def _nothing(scene: Scene) -> list[list[str]]:
    return []


def _launched(scene: Scene) -> list[list[str]]:
    return [scene.launch_args("echo up")]


def _up_with_output(scene: Scene) -> Progress:
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


def _up_and_running(scene: Scene) -> Progress:
    """UP after a stop and a start: every node back, each running its processes (Ray)."""
    cluster = scene.cluster()
    if cluster is None or cluster["status"] != "UP":
        return waiting(f"cluster {cluster and cluster['status']}")
    homes = scene.cli.node_homes(scene.name)
    if len(homes) != scene.num_nodes or not all(marked_pids(h) for h in homes):
        return waiting(f"{len(homes)} nodes, not all running")
    return DONE


def _gone(scene: Scene) -> Progress:
    cluster = scene.cluster()
    if cluster is not None:
        return waiting(f"cluster still {cluster['status']}")
    if scene.cli.node_homes(scene.name):
        return waiting("node sandboxes still there")
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


STORIES = {
    story.name: story
    for story in (
        Story("launch", 14, _nothing, lambda s: [s.launch_args(f"echo {s.marker}")],
              _up_with_output),
        Story("stop-start", 16, _launched,
              lambda s: [["stop", "-y", s.name], ["start", "-y", s.name]], _up_and_running),
        Story("down", 6, _launched, lambda s: [["down", "-y", s.name]], _gone),
        Story("managed-job", 25, _nothing,
              lambda s: [["jobs", "launch", "-y", "-d", "-n", s.name, "--cloud", "local",
                          "--cpus", "1", "--num-nodes", str(s.num_nodes),
                          f"sleep 3; echo {s.marker}"]],
              _job_succeeded, _controller_logs),
    )
}
