"""What a chaos run does, drawn from its seed and index: the story (local or AWS), the
cluster's size, when the kill lands, what it kills, and how long the control plane stays
down before ``orch server start`` brings it back.

Everything comes from ``random.Random(seed * 1000 + run)``, so a run is replayed by its
seed and index, whatever the machine (a run whose cloud cannot run here is skipped, not
replaced).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.chaos.aws_stories import AWS_STORIES
from tests.chaos.stories import LOCAL_STORIES, Story

STORIES: dict[str, Story] = {**LOCAL_STORIES, **AWS_STORIES}
# What a kill SIGKILLs: the worker, the Temporal dev server (its SQLite file persists), or
# both; drawn with these weights.
KILLS = {"worker": 5, "server": 2, "both": 3}
MAX_OUTAGE_S = 8.0  # the longest the control plane stays down after a kill


@dataclass(frozen=True)
class Plan:
    seed: int
    run: int
    story: str
    num_nodes: int
    kill_at_s: float  # after the story's first command starts
    kill: str  # a key of KILLS
    outage_s: float  # from the kill to the restart

    @property
    def name(self) -> str:
        return f"chaos-{self.seed}-{self.run}"

    @property
    def cloud(self) -> str:
        return STORIES[self.story].cloud

    @property
    def kills_server(self) -> bool:
        return self.kill in ("server", "both")

    @property
    def processes_killed(self) -> int:
        return 2 if self.kill == "both" else 1


def plan(seed: int, run: int) -> Plan:
    rng = random.Random(seed * 1000 + run)
    names = sorted(STORIES)
    story = rng.choices(names, weights=[STORIES[n].weight for n in names])[0]
    num_nodes = rng.choice((1, 2))
    kill_at = round(rng.uniform(0.5, STORIES[story].typical_s), 1)
    kill = rng.choices(list(KILLS), weights=list(KILLS.values()))[0]
    outage = round(rng.uniform(0.0, MAX_OUTAGE_S), 1)
    return Plan(seed, run, story, num_nodes, kill_at, kill, outage)
