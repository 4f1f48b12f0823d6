"""Leaving a test's own Temporal server (time-skipping or dev): no workflow coroutine of
the test left to be collected later, and, when the test failed, what the server held kept
for the post-mortem.

A failed test's server is shut down with the test, and its histories with it; a workflow
task that failed (a nondeterminism, say) names only a run id in the log. So before the
server goes, every execution it knows, open and closed (the first 1,000 of each: a test
makes far fewer), is written to ``$ORCH_TEST_DUMPS`` (default ``<tmp>/orch-test-dumps``),
one directory per failed test, one JSON file per run in the format
``tests/workflows/histories.py`` records (replayable with ``Replayer``).
"""

from __future__ import annotations

import gc
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import (
    ListClosedWorkflowExecutionsRequest,
    ListOpenWorkflowExecutionsRequest,
)
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

CALL_FAILED = pytest.StashKey[bool]()  # set by tests/conftest.py's report hook
PAGE = 1000


async def leave_server(env: WorkflowEnvironment, test: pytest.Item) -> None:
    """Shut ``env`` down at the end of ``test``, its workers already stopped."""
    try:
        if test.stash.get(CALL_FAILED, False):
            where = await dump_histories(env.client, test.nodeid)
            print(f"the test's Temporal histories: {where}")
    finally:
        collect_orphaned_workflows()
        await env.shutdown()


def _file_name(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text)


async def dump_histories(client: Client, test_id: str) -> Path:
    """Write every execution's history; returns the directory written."""
    service, namespace = client.workflow_service, client.namespace
    opened = await service.list_open_workflow_executions(
        ListOpenWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=PAGE))
    closed = await service.list_closed_workflow_executions(
        ListClosedWorkflowExecutionsRequest(namespace=namespace, maximum_page_size=PAGE))
    root = os.environ.get("ORCH_TEST_DUMPS") or Path(tempfile.gettempdir()) / "orch-test-dumps"
    directory = Path(root) / _file_name(test_id)
    directory.mkdir(parents=True, exist_ok=True)
    for info in [*opened.executions, *closed.executions]:
        execution = info.execution
        history = await client.get_workflow_handle(
            execution.workflow_id, run_id=execution.run_id).fetch_history()
        recorded = {"workflow_id": execution.workflow_id, "run_id": execution.run_id,
                    "history": json.loads(history.to_json())}
        name = _file_name(f"{execution.workflow_id}.{execution.run_id[:8]}")
        (directory / f"{name}.json").write_text(json.dumps(recorded))
    return directory


def collect_orphaned_workflows() -> None:
    """Collect, now, the coroutines of workflows a stopped worker dropped while they ran.

    A worker that shuts down with workflows in its cache leaves their coroutines to the
    garbage collector; collected later, while another test's workflow runs on the same
    thread, a coroutine's ``finally`` or ``except`` (a permit given back) issues its
    command into that other workflow, which then fails with a nondeterminism error
    ("Signal external WF machine does not handle this event") that no replay of its own
    history reproduces. Collected here, between tests, no workflow runs: such a command
    fails with "Not in workflow event loop" and goes nowhere."""
    gc.collect()
