"""A seeded chaos run (issue 12, part 9): a story told through the real ``orch`` CLI on a
cloud (:class:`~tests.chaos.stories.World`: the local cloud, or AWS through moto and the
twin), the worker, the Temporal dev server (whose SQLite file persists) or both SIGKILLed
at a moment of it (see :mod:`tests.chaos.plans`), the control plane left down for a
while and brought back with ``orch server start``, and then the checks: the story reaches
its end state within a bound (3 min after the restart, plus twice the story's usual
length; else it is stuck), no job ends in a wrong status
(FAILED_CONTROLLER, or FAILED where it should have SUCCEEDED), nothing of a cluster orch
no longer knows is left on the cloud (leaks: after the story, and after ``orch down -a``),
and no cluster ever has more nodes than it asked for (duplicates, sampled throughout).

A command the kill cut short (it exited non-zero) is run again once the control plane is
back, as a user would; a command meant to fail is not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from orch.runtime.procfs import alive
from tests.chaos.evidence import save_histories
from tests.chaos.plans import STORIES, Plan
from tests.chaos.stories import Progress, Scene, Step, Story, World, waiting
from tests.e2e.conftest import Orch, wait_for

# From the restart to the story's end state: a killed activity is retried after its
# heartbeat timeout (20 s) or start-to-close (2 min), and then the rest of the story runs,
# which on a loaded machine takes up to twice as long as usual.
END_STATE_BOUND_S = 180.0
LEAK_BOUND_S = 60.0
COMMAND_TIMEOUT_S = 300.0
# Between two looks through the CLI: each `orch` command costs about a second of CPU, and
# a look can take three (status, queue, logs); 2 cores run two lanes and their clusters.
CHECK_EVERY_S = 3.0


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
    evidence: str = ""  # the story's own record, and where the histories were saved
    error: str = ""  # a command the harness needed failed: the run could not be judged
    skipped: str = ""  # why the run's cloud cannot run here
    took_s: float = 0.0  # the whole run, preparation and cleanup included

    @property
    def ok(self) -> bool:
        return not (self.stuck or self.wrong or self.leaked or self.duplicates or self.error)


class _Steps(threading.Thread):
    """Runs the story's commands in order; retries one the kill cut short, once the
    control plane is back (``restarted`` is set). Once the run is judged, :meth:`abandon`
    kills the command still running and runs no other."""

    def __init__(self, cli: Orch, steps: list[Step], restarted: threading.Event):
        super().__init__(daemon=True)
        self.cli, self.steps, self.restarted = cli, steps, restarted
        self.current = ""
        self.retried: list[str] = []
        self.wrong = ""
        self._abandoned = threading.Event()
        self._process: subprocess.Popen[str] | None = None

    def _orch(self, args: list[str]) -> tuple[int, str]:
        """Exit code and output of ``orch args`` (killed when abandoned or too slow)."""
        if self._abandoned.is_set():
            return -1, "abandoned"
        self._process = process = self.cli.popen(*args)
        if self._abandoned.is_set():
            process.kill()
        try:
            output, _ = process.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        return process.returncode, output

    def run(self) -> None:
        for step in self.steps:
            self.current = " ".join(step.args[:2])
            code, output = self._orch(step.args)
            if step.fails:
                if code == 0:
                    self.wrong = f"`orch {self.current}` succeeded where it must fail"
            elif code != 0 and self.restarted.wait(COMMAND_TIMEOUT_S):
                said = output.strip().splitlines()[-3:]
                self.retried.append(f"{self.current} (exit {code}: {' / '.join(said)[-300:]})")
                self._orch(step.args)
        self.current = ""

    def abandon(self) -> None:
        self._abandoned.set()
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self.join(30)


class _NodeWatch(threading.Thread):
    """Samples the cloud until stopped: the most nodes each cluster had at once."""

    def __init__(self, cli: Orch, world: World):
        super().__init__(daemon=True)
        self.cli, self.world = cli, world
        self.most: dict[str, list[str]] = {}
        self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.4):
            try:
                seen = self.world.nodes(self.cli)
            except Exception:  # noqa: BLE001 - a missed sample; the next one counts
                self.failures += 1
                continue
            for name, nodes in seen.items():
                if len(nodes) > len(self.most.get(name, [])):
                    self.most[name] = nodes


def kill_control_plane(cli: Orch, kill: str) -> None:
    """SIGKILL the worker, the dev server or both, and wait until they are gone."""
    state = cli.plane().state()
    assert state is not None and state.worker_pid, "no control plane to kill"
    pids = {"worker": [state.worker_pid], "server": [state.server_pid],
            "both": [state.worker_pid, state.server_pid]}[kill]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(alive(pid) for pid in pids), 30, "the killed processes to die")


def _end_state(story: Story, scene: Scene, steps: _Steps, bound_s: float) -> Progress:
    """Poll the story's check, once its commands are done, until done, wrong or the bound."""
    deadline = time.monotonic() + bound_s
    progress = waiting("not checked")
    while time.monotonic() < deadline:
        if steps.is_alive():
            progress = waiting(f"`orch {steps.current}` still running")
        elif steps.wrong:
            return Progress("wrong", steps.wrong)
        else:
            progress = story.check(scene)
            if progress.state != "waiting":
                return progress
        time.sleep(CHECK_EVERY_S)
    return progress


def _known(cli: Orch) -> set[str]:
    """The names on cloud of every cluster ``orch status`` lists."""
    return {cli.cloud_name(c["name"]) for c in cli.json("status")}


def _settled_leaks(cli: Orch, world: World) -> list[str]:
    """Leaks that remain once a teardown in flight has had ``LEAK_BOUND_S`` to finish."""
    deadline = time.monotonic() + LEAK_BOUND_S
    found = world.leaks(cli, _known(cli))
    while found and time.monotonic() < deadline:
        time.sleep(CHECK_EVERY_S)
        found = world.leaks(cli, _known(cli))
    return found


def _controller_failures(cli: Orch) -> str:
    failed = [j["id"] for j in cli.json("jobs", "queue") if j["status"] == "FAILED_CONTROLLER"]
    return f"managed jobs {failed} FAILED_CONTROLLER" if failed else ""


def _kill_and_restart(cli: Orch, chosen: Plan, steps: _Steps, result: Result) -> float:
    """Kill at the plan's moment of the story, wait out the outage, restart; returns when
    the restart began (monotonic)."""
    time.sleep(max(0.0, chosen.kill_at_s))  # the chaos moment, after the first command began
    result.killed_during = steps.current
    result.killed_at = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-4]
    kill_control_plane(cli, chosen.kill)
    time.sleep(chosen.outage_s)
    restart = time.monotonic()
    cli("server", "start")
    steps.restarted.set()
    result.restart_s = round(time.monotonic() - restart, 1)
    return restart


def _tell(scene: Scene, chosen: Plan, result: Result, watch: _NodeWatch) -> None:
    """The story's commands, the kill, the restart, and the checks."""
    cli, story = scene.cli, STORIES[chosen.story]
    steps = _Steps(cli, story.steps(scene), threading.Event())
    steps.start()
    try:
        restart = _kill_and_restart(cli, chosen, steps, result)
        progress = _end_state(story, scene, steps, END_STATE_BOUND_S + 2 * story.typical_s)
        ended = time.monotonic()
    finally:
        steps.abandon()
    result.retried = steps.retried
    if progress.state == "done":
        result.resume_s = round(ended - restart, 1)
    elif progress.state == "wrong":
        result.wrong = progress.detail
    else:
        result.stuck = progress.detail
    result.wrong = "; ".join(w for w in (result.wrong, _controller_failures(cli)) if w)
    result.leaked = _settled_leaks(cli, scene.world)
    result.evidence = story.evidence(scene)
    result.duplicates = [f"{name}: {len(nodes)} nodes ({', '.join(nodes)})"
                         for name, nodes in watch.most.items() if len(nodes) > chosen.num_nodes]


def clean(cli: Orch, world: World) -> list[str]:
    """Cancel every managed job and tear every cluster down; what is left after that."""
    cli("jobs", "cancel", "--all", "-y", check=False)
    cli("down", "-a", "-y", check=False)
    deadline = time.monotonic() + LEAK_BOUND_S
    while time.monotonic() < deadline and (world.nodes(cli) or cli.json("status")):
        time.sleep(CHECK_EVERY_S)
    return [f"after down -a: {name}/{node}" for name, nodes in world.nodes(cli).items()
            for node in nodes] + world.leaks(cli, _known(cli))


def run_once(cli: Orch, world: World, chosen: Plan, evidence_dir: Path | None = None
             ) -> Result:
    """One chaos run on the control plane in ``cli``'s home, cleaned up after; the
    workflow histories of a failed run saved under ``evidence_dir``."""
    result = Result(chosen)
    began, since = time.monotonic(), datetime.now(UTC)
    scene = Scene(cli, chosen.name, chosen.num_nodes, world)
    story = STORIES[chosen.story]
    try:
        with world.around(scene):
            cli("server", "start")
            watch = _NodeWatch(cli, world)
            try:
                story.arrange(scene, "prepare")
                for command in story.prepare(scene):
                    cli(*command)
                story.arrange(scene, "story")
                watch.start()
                _tell(scene, chosen, result, watch)
            finally:
                watch.stopped.set()
                result.leaked += clean(cli, world)
    except Exception as error:  # noqa: BLE001 - a run the harness could not judge
        result.error = f"{type(error).__name__}: {error}"[:500]
    result.leaked = list(dict.fromkeys(result.leaked))  # seen after the story and after down -a
    if not result.ok and evidence_dir is not None:
        where = save_histories(cli, since, evidence_dir / chosen.name)
        result.evidence = "\n".join(e for e in (result.evidence, where) if e)
    result.took_s = round(time.monotonic() - began, 1)
    return result
