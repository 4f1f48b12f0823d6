"""Recorded workflow histories: the determinism guard's inputs.

Two kinds live under ``histories/``:

* ``histories/released/<version>/*.json``: what the workflows of a release recorded. Workers
  of that release may have left workflows running with such histories, so today's workflows
  must replay them for as long as such workflows may run. A released set is never
  re-recorded: ``MANIFEST.sha256`` beside it holds each file's digest, and
  ``tests/workflows/test_replay.py`` fails when a file no longer matches it.
* ``histories/*.json``: recordings of the workflows as they are now (none until a workflow
  change is recorded). ``ORCH_RECORD_HISTORIES=1 pytest tests/workflows`` writes them from
  the scenarios the workflow tests run.

Cutting a release: record (``ORCH_RECORD_HISTORIES=1 pytest tests/workflows``), then
``python -m tests.workflows.histories release <version>`` moves the recordings into
``released/<version>/`` and writes its manifest. Commit both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

DIRECTORY = Path(__file__).parent / "histories"  # new recordings land here
RELEASED = DIRECTORY / "released"
MANIFEST = "MANIFEST.sha256"


def load(path: Path) -> WorkflowHistory:
    recorded = json.loads(path.read_text())
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


def released_sets() -> list[Path]:
    """Each release's directory, oldest first."""
    sets = [p for p in RELEASED.glob("*") if p.is_dir()] if RELEASED.is_dir() else []
    return sorted(sets, key=lambda p: Version(p.name))


def current() -> list[Path]:
    return sorted(DIRECTORY.glob("*.json"))


def every_history() -> list[Path]:
    """The current recordings, then every released set's."""
    return current() + [p for release in released_sets() for p in sorted(release.glob("*.json"))]


def latest(name: str) -> Path:
    """The newest recording called ``name``: the current one, else the newest release's."""
    for directory in [DIRECTORY, *reversed(released_sets())]:
        if (directory / f"{name}.json").exists():
            return directory / f"{name}.json"
    raise FileNotFoundError(f"no recorded history named {name} under {DIRECTORY}")


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("*.json"))}


def read_manifest(directory: Path) -> dict[str, str]:
    lines = (directory / MANIFEST).read_text().splitlines()
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in lines if line)}


def write_manifest(directory: Path) -> None:
    text = "".join(f"{digest}  {name}\n" for name, digest in digests(directory).items())
    (directory / MANIFEST).write_text(text)


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


def release(version: str) -> Path:
    """Move the current recordings into ``released/<version>/`` with their manifest."""
    try:
        Version(version)
    except InvalidVersion:
        raise ValueError(f"{version!r} is not a version (e.g. 0.2.0)") from None
    recordings = current()
    if not recordings:
        raise ValueError("nothing recorded: run ORCH_RECORD_HISTORIES=1 pytest tests/workflows "
                         "first")
    target = RELEASED / version
    if target.exists():
        raise ValueError(f"{target} exists: a released set is never re-recorded")
    target.mkdir(parents=True)
    for path in recordings:
        path.rename(target / path.name)
    write_manifest(target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.workflows.histories")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("release", help="move the current recordings into released/<version>/"
                        ).add_argument("version")
    args = parser.parse_args(argv)
    try:
        target = release(args.version)
    except ValueError as err:
        parser.error(f"release {args.version}: {err}")
    print(f"{len(digests(target))} histories released to {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
