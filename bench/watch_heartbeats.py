"""What the managed-job watch's heartbeats cost at 2,000 jobs, per heartbeat timeout.

A watch heartbeats while it runs; the server learns that its worker died only when a
heartbeat is late by the heartbeat timeout, so after a worker crash a job's end waits up
to that timeout (plus the retry's own first interval) before a new watch sees it. The
SDK sends at most one heartbeat per 0.8 x the timeout, so the server takes
jobs / (0.8 x timeout) heartbeat RPCs a second. This bench measures their CPU cost on the
embedded dev server and on the worker, for each timeout in ``--timeouts``: ``--jobs``
activities that do nothing but heartbeat (every quarter of their timeout, as the watch
does), against the idle control plane, each over ``--window`` seconds. Nothing asserted;
the last line is JSON. From the repository root:

    .venv/bin/python -m bench.watch_heartbeats [--jobs 2000] [--timeouts 10 20 30 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client as TemporalClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.sim_cloud import CpuWindow, control_plane, exit_on_sigterm, load_average
from orch.client.codec import orch_data_converter

TASK_QUEUE = "bench-heartbeats"
STARTING_AT_ONCE = 50


@activity.defn
async def heartbeat_only() -> None:
    timeout = activity.info().heartbeat_timeout
    assert timeout is not None
    with contextlib.suppress(asyncio.CancelledError):  # terminated: end quietly
        while True:
            activity.heartbeat({"log_offset": 0})
            await asyncio.sleep(timeout.total_seconds() / 4)


@workflow.defn
class HeartbeatOnly:
    @workflow.run
    async def run(self, timeout_s: float) -> None:
        await workflow.execute_activity(
            heartbeat_only, start_to_close_timeout=timedelta(days=1),
            heartbeat_timeout=timedelta(seconds=timeout_s))


async def start_all(client: TemporalClient, jobs: int, timeout_s: float) -> list[str]:
    limit = asyncio.Semaphore(STARTING_AT_ONCE)
    ids = [f"beat-{timeout_s:g}-{i}" for i in range(jobs)]

    async def start(workflow_id: str) -> None:
        async with limit:
            await client.start_workflow(HeartbeatOnly.run, timeout_s, id=workflow_id,
                                        task_queue=TASK_QUEUE)

    await asyncio.gather(*(start(i) for i in ids))
    return ids


async def terminate_all(client: TemporalClient, ids: list[str]) -> None:
    limit = asyncio.Semaphore(STARTING_AT_ONCE)

    async def terminate(workflow_id: str) -> None:
        async with limit:
            await client.get_workflow_handle(workflow_id).terminate()

    await asyncio.gather(*(terminate(i) for i in ids))


async def measure(address: str, server_pid: int, jobs: int, timeouts: list[float],
                  window: float) -> dict[str, Any]:
    client = await TemporalClient.connect(address, data_converter=orch_data_converter())
    pids = {"server": server_pid, "worker": os.getpid()}
    figures: dict[str, Any] = {"jobs": jobs, "window_s": window}
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[HeartbeatOnly],
                      activities=[heartbeat_only], max_concurrent_activities=jobs + 100,
                      workflow_runner=UnsandboxedWorkflowRunner()):
        cpu = CpuWindow(pids)
        await asyncio.sleep(window)
        idle = cpu.fractions()
        figures["idle"] = {k: round(v, 4) for k, v in idle.items()}
        for timeout_s in timeouts:
            ids = await start_all(client, jobs, timeout_s)
            await asyncio.sleep(timeout_s + 5)  # every activity has started and beaten
            cpu = CpuWindow(pids)
            await asyncio.sleep(window)
            busy = cpu.fractions()
            await terminate_all(client, ids)
            above = {k: busy[k] - idle[k] for k in busy}
            figures[f"timeout_{timeout_s:g}s"] = {
                "heartbeats_per_s": round(jobs / (0.8 * timeout_s), 1),
                "server_core_frac": round(above["server"], 4),
                "worker_core_frac": round(above["worker"], 4),
                "crash_seen_within_s": timeout_s}
            print(f"  heartbeat timeout {timeout_s:g} s: {jobs / (0.8 * timeout_s):.0f} "
                  f"heartbeats/s, server +{100 * above['server']:.1f} %, worker "
                  f"+{100 * above['worker']:.1f} % of one core", flush=True)
            await asyncio.sleep(5)
    return figures


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--timeouts", type=float, nargs="+", default=[10, 20, 30, 60])
    parser.add_argument("--window", type=float, default=60.0)
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="orch-bench-beats-") as directory, \
            control_plane(Path(directory)) as state:
        started = time.monotonic()
        figures = asyncio.run(measure(state.address, state.server_pid, args.jobs,
                                      args.timeouts, args.window))
        figures["took_s"] = round(time.monotonic() - started)
    figures["machine"] = {"cpus": os.cpu_count(), "load_before": load_before,
                          "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
