"""A seeded chaos run on the local cloud (issue 12, part 9): a story told through the real
``orch`` CLI, the worker (and in some runs the Temporal dev server, whose SQLite file
persists) SIGKILLed at a random moment of it, the control plane brought back with
``orch server start``, and then the checks: the story reaches its end state within a
bound (else it is stuck), no job ends in a wrong status (FAILED_CONTROLLER, or FAILED
where it should have SUCCEEDED), nothing orch no longer knows is left on the cloud
(leaks), and no cluster ever has more nodes than it asked for (duplicates).

Everything random comes from ``random.Random(seed * 1000 + run)``, so a run is replayed
by its seed and index. A command the kill cut short (it exited non-zero) is run again
once the control plane is back, as a user would.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orch.runtime.procfs import alive
from tests.chaos.checks import duplicates, leaks, sandboxes
from tests.chaos.stories import STORIES, Progress, Scene, waiting
from tests.e2e.conftest import Orch, wait_for

SERVER_KILL_CHANCE = 0.4
END_STATE_BOUND_S = 180.0
LEAK_BOUND_S = 60.0
COMMAND_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    seed: int
    run: int
    story: str
    num_nodes: int
    kill_at_s: float  # after the story's first command starts
    kill_server: bool

    @property
    def name(self) -> str:
        return f"chaos-{self.seed}-{self.run}"


def plan(seed: int, run: int) -> Plan:
    rng = random.Random(seed * 1000 + run)
    story = rng.choice(sorted(STORIES))
    num_nodes = rng.choice((1, 2))
    kill_at = round(rng.uniform(0.5, STORIES[story].typical_s), 1)
    return Plan(seed, run, story, num_nodes, kill_at, rng.random() < SERVER_KILL_CHANCE)


@dataclass
class Result:
    plan: Plan
    killed_during: str = ""  # the command running when the kill landed ("" if none was)
    killed_at: str = ""  # UTC, to place the kill in the story's own logs
    restart_s: float = 0.0  # how long `orch server start` took
    resume_s: float | None = None  # from the restart to the end state; None if stuck
    retried: list[str] = field(default_factory=list)
    stuck: str = ""
    wrong: str = ""
    leaked: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    evidence: str = ""  # the story's own record (a managed job's controller log)
    error: str = ""  # a command the harness needed failed: the run could not be judged

    @property
    def ok(self) -> bool:
        return not (self.stuck or self.wrong or self.leaked or self.duplicates or self.error)


class _Steps(threading.Thread):
    """Runs the story's commands in order; retries one the kill cut short, once the
    control plane is back (``restarted`` is set)."""

    def __init__(self, cli: Orch, steps: list[list[str]], restarted: threading.Event):
        super().__init__(daemon=True)
        self.cli, self.steps, self.restarted = cli, steps, restarted
        self.current = ""
        self.retried: list[str] = []

    def run(self) -> None:
        for step in self.steps:
            self.current = " ".join(step[:2])
            result = self.cli(*step, check=False, timeout=COMMAND_TIMEOUT_S)
            if result.returncode != 0 and self.restarted.wait(COMMAND_TIMEOUT_S):
                said = (result.stdout + result.stderr).strip().splitlines()[-3:]
                self.retried.append(f"{self.current} (exit {result.returncode}: "
                                    f"{' / '.join(said)[-300:]})")
                self.cli(*step, check=False, timeout=COMMAND_TIMEOUT_S)
        self.current = ""


class _NodeWatch(threading.Thread):
    """Samples the local cloud's sandboxes until stopped: the most nodes each cluster had."""

    def __init__(self, cli: Orch):
        super().__init__(daemon=True)
        self.cli = cli
        self.most: dict[str, list[str]] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.3):
            for name, nodes in sandboxes(self.cli).items():
                if len(nodes) > len(self.most.get(name, [])):
                    self.most[name] = nodes


def kill_control_plane(cli: Orch, server_too: bool) -> None:
    """SIGKILL the worker (and the dev server) and wait until they are gone."""
    state = cli.plane().state()
    assert state is not None and state.worker_pid, "no control plane to kill"
    pids = [state.worker_pid, *([state.server_pid] if server_too else [])]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(alive(pid) for pid in pids), 30, "the killed processes to die")


def _end_state(check: Callable[[Scene], Progress], scene: Scene, steps: _Steps,
               bound_s: float) -> Progress:
    """Poll the story's check, once its commands are done, until done, wrong or the bound."""
    deadline = time.monotonic() + bound_s
    progress = waiting("its commands are still running")
    while time.monotonic() < deadline:
        if not steps.is_alive():
            progress = check(scene)
            if progress.state != "waiting":
                return progress
        time.sleep(1)
    return progress


def _settled_leaks(cli: Orch) -> list[str]:
    """Leaks that remain once a teardown in flight has had ``LEAK_BOUND_S`` to finish."""
    deadline = time.monotonic() + LEAK_BOUND_S
    found = leaks(cli)
    while found and time.monotonic() < deadline:
        time.sleep(2)
        found = leaks(cli)
    return found


def _controller_failures(cli: Orch) -> str:
    failed = [j["id"] for j in cli.json("jobs", "queue") if j["status"] == "FAILED_CONTROLLER"]
    return f"managed jobs {failed} FAILED_CONTROLLER" if failed else ""


def _tell(cli: Orch, chosen: Plan, result: Result, watch: _NodeWatch) -> None:
    """The story's commands, the kill at its moment, the restart, and the checks."""
    story = STORIES[chosen.story]
    scene = Scene(cli, chosen.name, chosen.num_nodes)
    restarted = threading.Event()
    steps = _Steps(cli, story.steps(scene), restarted)
    started = time.monotonic()
    steps.start()
    time.sleep(max(0.0, started + chosen.kill_at_s - time.monotonic()))  # the chaos moment
    result.killed_during = steps.current
    result.killed_at = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-4]
    kill_control_plane(cli, chosen.kill_server)
    restart = time.monotonic()
    cli("server", "start")
    restarted.set()
    result.restart_s = round(time.monotonic() - restart, 1)
    progress = _end_state(story.check, scene, steps, END_STATE_BOUND_S)
    result.retried = steps.retried
    if progress.state == "done":
        result.resume_s = round(time.monotonic() - restart, 1)
    elif progress.state == "wrong":
        result.wrong = progress.detail
    else:
        result.stuck = progress.detail
    result.wrong = "; ".join(w for w in (result.wrong, _controller_failures(cli)) if w)
    result.leaked = _settled_leaks(cli)
    result.evidence = story.evidence(scene)
    result.duplicates = duplicates(watch.most, chosen.num_nodes)


def clean(cli: Orch) -> list[str]:
    """Cancel every managed job and tear every cluster down; what is left after that."""
    cli("jobs", "cancel", "--all", "-y", check=False)
    cli("down", "-a", "-y", check=False)
    deadline = time.monotonic() + LEAK_BOUND_S
    while time.monotonic() < deadline and (_nodes_left(cli) or cli.json("status")):
        time.sleep(2)
    return [f"after down -a: {node}" for node in _nodes_left(cli)] + leaks(cli)


def _nodes_left(cli: Orch) -> list[str]:
    return [f"{name}/{node}" for name, nodes in sandboxes(cli).items() for node in nodes]


def run_once(cli: Orch, chosen: Plan) -> Result:
    """One chaos run on the control plane in ``cli``'s home, cleaned up after."""
    result = Result(chosen)
    cli("server", "start")
    for command in STORIES[chosen.story].prepare(Scene(cli, chosen.name, chosen.num_nodes)):
        cli(*command)
    watch = _NodeWatch(cli)
    watch.start()
    try:
        _tell(cli, chosen, result, watch)
    except (AssertionError, subprocess.TimeoutExpired) as error:
        result.error = str(error)[:500]
    finally:
        watch.stopped.set()
        result.leaked += clean(cli)
    return result
