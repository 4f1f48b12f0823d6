"""A campaign's lanes and journal: each lane is one control plane at a time (an ORCH_HOME
under ``<out>/lanes/<lane>/home-<n>``) on one world; the journal is the results file that
makes a campaign restartable."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from orch.runtime.procfs import kill_all
from tests.chaos.harness import Result
from tests.chaos.local_world import node_processes
from tests.chaos.report import from_json, to_json
from tests.chaos.stories import World
from tests.e2e.conftest import Orch

# Two servers starting at once in different homes could pick the same free port.
_STARTING = threading.Lock()


@dataclass
class Lane:
    name: str
    world: World
    root: Path

    def fresh_home(self) -> Orch:
        """A control plane in a new ORCH_HOME, started, with what the world needs in its
        environment."""
        with _STARTING:
            taken = len(list(self.root.glob("home-*")))
            home = self.root / f"home-{taken}"
            home.mkdir(parents=True)
            cli = Orch(home)
            cli.env.update(self.world.env())
            cli("server", "start")
        return cli

    def retire(self, cli: Orch) -> None:
        """Stop the home's control plane and whatever its local nodes still run."""
        retire(cli.home)


def retire(home: Path) -> None:
    if (home / "server" / "state.json").exists():
        Orch(home)("server", "stop", check=False)
    kill_all(lambda: node_processes(home))


def retire_all(lanes: Path) -> None:
    """Stop what an interrupted campaign left running in its lanes' homes."""
    for home in sorted(lanes.glob("*/home-*")):
        retire(home)


class Journal:
    """``results.jsonl``: one line per finished run (of any seed; this journal's seed's
    are read back)."""

    def __init__(self, path: Path, seed: int):
        self.path, self.seed = path, seed
        self._lock = threading.Lock()
        self.results: dict[int, Result] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    result = from_json(line)
                except (ValueError, TypeError):
                    continue  # a line cut short by an interrupted campaign
                if result.plan.seed == seed:
                    self.results[result.plan.run] = result

    def record(self, result: Result) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as journal:
                journal.write(to_json(result) + "\n")
            self.results[result.plan.run] = result
