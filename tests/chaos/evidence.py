"""The workflow histories of a chaos run that went wrong, kept for whoever reads the report:
every workflow the lane's dev server started since the run began, one JSON history per
run of a workflow (``temporal workflow show --output json``), and a list of them with
their statuses (``workflows.txt``)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

from orch.config import venv_binary
from tests.e2e.conftest import Orch

TIMEOUT_S = 60


def _temporal(cli: Orch, *args: str) -> str:
    state = cli.plane().state()
    if state is None:
        raise RuntimeError("no control plane to read histories from")
    done = subprocess.run([str(venv_binary("temporal")), *args, "--address", state.address,
                           "--output", "json"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=True)
    return done.stdout


def save_histories(cli: Orch, since: datetime, dest: Path) -> str:
    """Write the histories of the workflows started since ``since`` into ``dest``; returns
    where they are, or why they could not be read."""
    try:
        listed = _temporal(cli, "workflow", "list", "--query",
                           f'StartTime > "{since.isoformat()}"')
        workflows = json.loads(listed)  # one JSON array
        dest.mkdir(parents=True, exist_ok=True)
        lines = []
        for n, workflow in enumerate(workflows):
            execution = workflow["execution"]
            lines.append(f"{n:03d} {execution['workflowId']} {execution['runId']} "
                         f"{workflow.get('status', '?')}")
            history = _temporal(cli, "workflow", "show", "-w", execution["workflowId"],
                                "-r", execution["runId"])
            (dest / f"{n:03d}.json").write_text(history)
        (dest / "workflows.txt").write_text("\n".join(lines) + "\n")
        return f"{len(workflows)} workflow histories in {dest}"
    except (OSError, RuntimeError, ValueError, KeyError, subprocess.SubprocessError) as error:
        return f"histories not saved: {type(error).__name__}: {error}"[:300]
