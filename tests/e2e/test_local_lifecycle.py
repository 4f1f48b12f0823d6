"""Stop, start, refresh and autostop on the local cloud, end to end."""

from __future__ import annotations

import shutil

import pytest

from orch.runtime.local_processes import kill_marked, marked_pids
from tests.e2e.conftest import Orch, wait_for
from tests.e2e.test_local_cluster import cluster_status

pytestmark = pytest.mark.e2e


def test_stop_keeps_the_disks_and_start_brings_ray_back(orch: Orch) -> None:
    orch("launch", "-c", "life", "--num-nodes", "2", "--workdir", "examples/hello_workdir",
         "echo kept > kept.txt")
    homes = orch.node_homes("life")

    orch("stop", "-y", "life")
    assert wait_for(lambda: (cluster_status(orch, "life") or {}).get("status") == "STOPPED",
                    what="STOPPED in status")
    assert all(marked_pids(h) == [] for h in homes)  # no process left on any node
    refused = orch("exec", "life", "echo no", check=False)
    assert refused.returncode == 1 and "not UP" in refused.stderr

    orch("start", "-y", "life")
    assert all(marked_pids(h) for h in homes)  # Ray again on every node
    result = orch("exec", "life", "--num-nodes", "2", "cat kept.txt")
    assert result.stdout.count("kept") == 2
    orch("down", "-y", "life")
    assert orch.node_homes("life") == []


def test_refresh_tells_the_truth_after_changes_behind_orchs_back(orch: Orch) -> None:
    orch("launch", "-c", "truth", "--num-nodes", "2", "echo up")
    head, worker = orch.node_homes("truth")

    # A worker "preempted": its processes killed and its machine gone.
    kill_marked(worker)
    shutil.rmtree(worker)
    refreshed = orch("status", "--refresh")
    assert "truth is INIT" in refreshed.stdout and "missing" in refreshed.stdout

    kill_marked(head)
    shutil.rmtree(head)
    gone = orch("status", "--refresh")
    assert "truth removed" in gone.stdout and "preempted" in gone.stdout
    assert cluster_status(orch, "truth") is None


def test_autodown_after_the_job_ends(orch: Orch) -> None:
    orch("launch", "-c", "brief", "-i", "0", "--down", "sleep 3; echo done")
    summary = cluster_status(orch, "brief")
    assert summary is None or summary["status"] == "UP"
    wait_for(lambda: cluster_status(orch, "brief") is None, timeout=120,
             what="autodown of brief")
    assert orch.node_homes("brief") == []


def test_a_relaunch_keeps_the_clusters_shape_and_a_misfit_is_exit_2(orch: Orch) -> None:
    """`orch launch -c NAME CMD` (one node) on a 2-node cluster left INIT (a worker lost)
    brings both nodes back, as SkyPilot reuses the cluster's resources; asking for more
    nodes than the cluster has is the user's mistake: exit 2, nothing touched."""
    orch("launch", "-c", "shape", "--num-nodes", "2", "echo up")
    _, worker = orch.node_homes("shape")
    kill_marked(worker)
    shutil.rmtree(worker)
    refreshed = orch("status", "--refresh").stdout
    assert "shape is INIT" in refreshed
    assert "orch launch -c shape TASK retries" in refreshed and "orch down shape" in refreshed

    relaunched = orch("launch", "-c", "shape", "echo again on $ORCH_NUM_NODES")
    assert "again on 1" in relaunched.stdout
    assert len(orch.node_homes("shape")) == 2
    summary = cluster_status(orch, "shape")
    assert summary is not None and summary["status"] == "UP" and summary["num_nodes"] == 2

    refused = orch("launch", "-c", "shape", "--num-nodes", "3", "echo no", check=False)
    assert refused.returncode == 2, refused.stderr
    assert "Task requested 3 nodes, but the existing cluster shape has 2" in refused.stderr
    assert "orch down shape" in refused.stderr
    orch("down", "-y", "shape")
