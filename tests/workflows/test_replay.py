"""Determinism guard: every recorded history replays cleanly against today's workflows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.workflows.histories import DIRECTORY, load
from workers.registry import WORKFLOWS

HISTORIES = sorted(DIRECTORY.glob("*.json"))


def test_there_is_a_history_for_every_workflow() -> None:
    recorded = {
        json.loads(p.read_text())["history"]["events"][0][
            "workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
        for p in HISTORIES
    }
    names = {w.__temporal_workflow_definition.name for w in WORKFLOWS}  # type: ignore[attr-defined]
    assert names <= recorded, f"no recorded history for {sorted(names - recorded)}"


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    history = load(path)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
