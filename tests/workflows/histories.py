"""Recorded workflow histories: the determinism guard's inputs.

``ORCH_RECORD_HISTORIES=1 pytest tests/workflows`` rewrites them from the scenarios the
workflow tests run; commit them when a change to a workflow is meant to be incompatible
(and version the workflow), never to make a replay failure go away.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

DIRECTORY = Path(__file__).parent / "histories"


def load(path: Path) -> WorkflowHistory:
    recorded = json.loads(path.read_text())
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


async def save_with_children(client: Client, handle: WorkflowHandle, name: str) -> None:
    """Save the history of ``handle`` and of every child workflow it started, recursively."""
    if not os.environ.get("ORCH_RECORD_HISTORIES"):
        return
    history = await handle.fetch_history()
    DIRECTORY.mkdir(exist_ok=True)
    recorded = {"workflow_id": handle.id, "history": json.loads(history.to_json())}
    (DIRECTORY / f"{name}.json").write_text(json.dumps(recorded))
    children = [
        event.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    ]
    for index, child_id in enumerate(children):
        child_type = child_id.rsplit("/", 1)[-1].split("-")[0]
        await save_with_children(
            client, client.get_workflow_handle(child_id), f"{name}.{index}-{child_type}"
        )
