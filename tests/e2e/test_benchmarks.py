"""The simulated-cloud benchmarks still run, end to end, at a tiny size: their figures are
never asserted here (they are timings), only that each run finishes, is consistent and
prints its JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.sshd import unavailable_reason

REPO = Path(__file__).resolve().parents[2]


def last_json(args: list[str], timeout: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, timeout=timeout,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(autouse=True)
def _needs_sshd() -> None:
    if reason := unavailable_reason():
        pytest.skip(reason)


def test_managed_jobs_scale_runs_on_the_simulated_cloud() -> None:
    figures = last_json(["bench.managed_jobs_scale", "--jobs", "8", "--window", "3",
                         "--ended", "1", "--no-baseline"], timeout=900)
    assert figures["jobs"] == 8 and figures["baseline"] is None
    assert 1 <= figures["peak_launching"] <= figures["permits"]
    assert figures["all_cancelled"] and figures["cancelled"] == 6
    assert figures["clusters_left"] == 0
    assert figures["events_per_job_hour"] == 0  # a running job adds nothing to its history
    assert figures["heads_cpu_s_per_job"] > 0 and figures["machine_cpu_s_per_job"] > 0
    # Not a timing: which mechanism saw the end after the worker's SIGKILL. The restarted
    # worker's takeover does in seconds; the watch's 5-minute heartbeat timeout would not.
    assert figures["end_seen_after_crash_max_s"] < 120


def test_failover_hops_runs_on_the_simulated_cloud() -> None:
    figures = last_json(["bench.failover_hops", "--rounds", "1"], timeout=900)
    assert figures["candidates"] == 10 and figures["failing"] == 9
    assert isinstance(figures["per_hop_overhead_s"], float)


def test_workflow_pollers_runs_both_ways() -> None:
    figures = last_json(["bench.workflow_pollers", "--workflows", "20"], timeout=300)
    assert figures["workflows"] == figures["baseline"]["workflows"] == 20
    assert "Autoscaling" in figures["pollers"] and "SimpleMaximum" in figures["baseline"]["pollers"]
    assert set(figures["speedup"]) == {"new_closed_s", "closed_s"}
