"""Determinism guard: today's workflows replay every recorded history, the current
recordings (``histories/*.json``) and those of every earlier release
(``histories/released/<version>/*.json``).

Workers are upgraded while workflows run: a cluster's entity workflow lives as long as the
cluster, a managed job's as long as the job. A new worker then replays histories written by
the previous release's code, so a released set must keep replaying and is never
re-recorded (its manifest catches an overwritten file). A workflow change that breaks the
replay of a released history must keep the old command sequence for the old histories:
branch on ``workflow.patched("<change-id>")`` (new code inside, old code in the else), and
once no workflow of the release before the patch can be running, replace the branch with
``workflow.deprecate_patch("<change-id>")``. Worker versioning (one deployment version per
release, old workers kept until their workflows end) is the other way; orch uses patching.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.worker import Replayer

from orch.client.codec import CodecKey, orch_data_converter
from tests.workflows.histories import (
    DIRECTORY,
    digests,
    every_history,
    load,
    read_manifest,
    released_sets,
)
from workers.registry import WORKFLOWS

HISTORIES = every_history()


def workflow_type(path: Path) -> str:
    first = json.loads(path.read_text())["history"]["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


def test_a_release_is_recorded() -> None:
    assert released_sets(), f"no released histories under {DIRECTORY / 'released'}"


def test_there_is_a_history_for_every_workflow() -> None:
    recorded = {workflow_type(p) for p in HISTORIES}
    names = {w.__temporal_workflow_definition.name for w in WORKFLOWS}  # type: ignore[attr-defined]
    assert names <= recorded, f"no recorded history for {sorted(names - recorded)}"


@pytest.mark.parametrize("release", released_sets(), ids=[p.name for p in released_sets()])
def test_a_released_set_is_never_re_recorded(release: Path) -> None:
    assert digests(release) == read_manifest(release), (
        f"{release} differs from its manifest: a released history was re-recorded, added or "
        "removed. Restore it (git checkout) and version the workflow change instead "
        "(workflow.patched); new recordings belong in histories/ itself")


@pytest.mark.parametrize("path", HISTORIES, ids=[str(p.relative_to(DIRECTORY)) for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    history = load(path)
    # orch's converter, as workers have it: these histories were recorded before its codec
    # (and their payloads hold no secret), so they replay only if it passes unmarked
    # payloads through as they are.
    converter = orch_data_converter(CodecKey.generate("the replay test"))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=converter)
    await replayer.replay_workflow(history)


def test_cutting_a_release_moves_the_recordings_and_pins_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.workflows import histories

    monkeypatch.setattr(histories, "DIRECTORY", tmp_path)
    monkeypatch.setattr(histories, "RELEASED", tmp_path / "released")
    with pytest.raises(ValueError, match="nothing recorded"):
        histories.release("0.2.0")
    source = HISTORIES[0]
    (tmp_path / "cluster_launch.json").write_bytes(source.read_bytes())
    with pytest.raises(ValueError, match="not a version"):
        histories.release("next")
    target = histories.release("0.2.0")
    assert histories.current() == [] and histories.released_sets() == [target]
    assert histories.latest("cluster_launch") == target / "cluster_launch.json"
    assert histories.digests(target) == histories.read_manifest(target)
    (tmp_path / "cluster_launch.json").write_bytes(source.read_bytes())
    assert histories.latest("cluster_launch") == tmp_path / "cluster_launch.json"
    with pytest.raises(ValueError, match="never re-recorded"):
        histories.release("0.2.0")
    (target / "cluster_launch.json").write_text("{}")  # re-recorded by hand
    assert histories.digests(target) != histories.read_manifest(target)
