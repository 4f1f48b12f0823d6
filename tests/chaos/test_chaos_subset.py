"""A short seeded chaos campaign for the suite (issue 12, part 9): seed 12, runs 0-2, a
teardown with the dev server killed too, a 2-node launch and a managed job with the worker
killed. The full campaign is ``python -m tests.chaos.run --seed 12 --runs 20``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import plan
from tests.chaos.run import campaign

pytestmark = pytest.mark.e2e
SEED, RUNS = 12, range(3)


def test_the_subset_kills_a_worker_and_a_server() -> None:
    plans = [plan(SEED, run) for run in RUNS]
    assert any(p.kill_server for p in plans) and not all(p.kill_server for p in plans)
    assert {p.story for p in plans} == {"down", "launch", "managed-job"}


def test_nothing_leaks_doubles_sticks_or_ends_wrong(tmp_path: Path) -> None:
    results = campaign(SEED, RUNS, tmp_path / "chaos-home")

    assert [r.leaked for r in results] == [[], [], []]
    assert [r.duplicates for r in results] == [[], [], []]
    assert [r.stuck for r in results] == ["", "", ""]
    assert [r.wrong for r in results] == ["", "", ""], [r.evidence for r in results]
    assert [r.error for r in results] == ["", "", ""]
