"""``ray_node start`` after a start cut short, on a local-cloud node with real Ray
(orch/runtime/ray_node.py, orch/runtime/ray_intent.py).

The first start is a real ``ray_node start`` killed with SIGKILL once its GCS is up, as a
worker killed mid-activity would leave it: either with the ``ray start`` it ran (so the
GCS, and maybe the raylet, are orphans) or without it (so ``ray start`` goes on starting
daemons while the retry runs). The retry must end with exactly one GCS and one raylet on
the node, and ``stop`` with none of the node's processes left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orch.clouds.base import NodeInfo
from orch.runtime import ray_intent
from orch.runtime.local_processes import marked_pids
from orch.runtime.procfs import command_line
from orch.runtime.runner import LocalRunner
from tests.e2e.conftest import wait_for


@pytest.fixture
def node(tmp_path: Path) -> NodeInfo:
    home = tmp_path / "node"
    home.mkdir()
    # A loopback address of its own: other tests' local nodes may run Ray meanwhile.
    ip = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"
    return NodeInfo(instance_id="local-crash", internal_ip=ip, runner="local",
                    home=str(home), python=sys.executable)


def ray_node(node: NodeInfo, args: str) -> str:
    return f"{sys.executable} -m orch.runtime.ray_node {args}"


def daemons(node: NodeInfo, name: str) -> list[int]:
    """The node's live processes running Ray's binary ``name`` (gcs_server, raylet)."""
    assert node.home
    return [pid for pid in marked_pids(node.home)
            if (args := command_line(pid)) and args[0].endswith("/" + name)]


def ray_start_cli(node: NodeInfo) -> list[int]:
    assert node.home
    return [pid for pid in marked_pids(node.home)
            if (args := command_line(pid)) and "start" in args and any(
                a.endswith("/ray") for a in args[:2]) and "orch.runtime.ray_node" not in args]


KILLED = {
    "ray_node and its ray start": lambda first, node: [first.pid, *ray_start_cli(node)],
    "ray_node alone": lambda first, node: [first.pid],
    # The worker died but the node's command goes on (a local runner's command outlives
    # its worker): the retry runs while the first start still does.
    "nothing": lambda first, node: [],
}


@pytest.mark.parametrize("killed", KILLED)
def test_a_start_cut_short_after_the_gcs_came_up_leaves_one_head_after_the_retry(
    node: NodeInfo, killed: str
) -> None:
    assert node.home
    runner = LocalRunner(node)
    start = ray_node(node, f"start --ip {node.internal_ip} --cpus 1")
    first = subprocess.Popen(["bash", "-c", f"exec {start}"], env=runner.environment(),
                             cwd=node.home, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: daemons(node, "gcs_server") or first.poll() is not None,
                 timeout=180, what="the first start's GCS")
        assert first.poll() is None, "the first start ended before it could be cut short"
        for pid in KILLED[killed](first, node):
            os.kill(pid, signal.SIGKILL)
        if killed != "nothing":
            first.wait()
            intent = json.loads((Path(node.home) / ".orch-node/ray.json").read_text())
            assert intent["started"] is False and intent["head"] is True
            assert daemons(node, "gcs_server")  # what the cut-short start left

        answer = runner.check(start, timeout=300)
        first.wait(timeout=60)  # stopped by the retry, or (nothing killed) done before it
        gcs_address = json.loads(answer.tail.splitlines()[-1])["gcs_address"]

        gcs_servers = daemons(node, "gcs_server")
        assert len(gcs_servers) == 1
        raylets = daemons(node, "raylet")
        assert len(raylets) == 1
        assert f"--gcs-address={gcs_address}" in command_line(raylets[0])
        assert json.loads((Path(node.home) / ".orch-node/ray.json").read_text())["started"]

        # A completed start of a head that is alive is reused, not started again.
        again = runner.check(start, timeout=300)
        assert json.loads(again.tail.splitlines()[-1])["gcs_address"] == gcs_address
        assert (daemons(node, "gcs_server"), daemons(node, "raylet")) == (gcs_servers, raylets)
    finally:
        first.kill()
        first.wait()
        runner.run(ray_node(node, "stop"), timeout=120)
    assert marked_pids(node.home) == []
    assert not (Path(node.home) / ".orch-node/ray.json").exists()


def test_a_state_file_from_before_intents_reads_as_a_completed_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_intent, "INTENT_FILE", tmp_path / "ray.json")
    (tmp_path / "ray.json").write_text('{"gcs_address": "10.0.0.5:6380", "ip": "10.0.0.5"}')
    intent = ray_intent.read_intent()
    assert intent is not None
    assert (intent.started, intent.head, intent.port) == (True, None, "6380")


def test_the_intent_names_its_gcs_server_and_not_a_users_own_ray() -> None:
    intent = ray_intent.RayIntent(gcs_address="10.0.0.5:6380", ip="10.0.0.5", head=True)
    gcs = ["/site/ray/core/src/ray/gcs/gcs_server", "--gcs_server_port={}",
           "--node-ip-address=10.0.0.5"]
    assert ray_intent._names_intent([a.format(6380) for a in gcs], intent)
    assert not ray_intent._names_intent([a.format(6379) for a in gcs], intent)
    monitor = ["python", "monitor.py", "--gcs-address={}"]
    assert ray_intent._names_intent([a.format("10.0.0.5:6380") for a in monitor], intent)
    assert not ray_intent._names_intent([a.format("10.0.0.5:6379") for a in monitor], intent)
