"""How fast a burst of workflow tasks gets through the worker, by how it polls for them.

The worker fetches tasks with a number of polls in flight, most of them on its own
("sticky") queue, where the tasks of the workflows it holds in its cache go; the tasks of
workflows new to it (a launch's child workflows) go to the shared queue, which the SDK's
default of 5 polls serves with one. Two bursts, each of ``--workflows`` (default 2,000):

* new: workflows started from a second client (64 at once) that end in their first
  task: the time until every one has closed;
* cached (a cancel-all's shape): workflows that wait for a signal, all signalled once the
  worker has done their first tasks: the time from the first signal until every one has
  closed, and the CPU of the dev server and of this process (the worker, and the client
  that signals) over it.

Each on a fresh embedded control plane, with a worker polling the SDK's default way (the
baseline) and with one polling the production worker's way (``workers.__main__.POLLERS``).
Nothing asserted; the last line is JSON. From the repository root:

    .venv/bin/python -m bench.workflow_pollers [--workflows 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import (
    PollerBehavior,
    PollerBehaviorSimpleMaximum,
    UnsandboxedWorkflowRunner,
    Worker,
)

from bench.sim_cloud import CpuWindow, control_plane, exit_on_sigterm, load_average
from workers.__main__ import MAX_CACHED_WORKFLOWS, POLLERS

TASK_QUEUE = "bench-workflow-pollers"
AT_ONCE = 64
SDK_DEFAULT = PollerBehaviorSimpleMaximum(maximum=5)


@workflow.defn
class EndAtOnce:
    @workflow.run
    async def run(self) -> None:
        return None


@workflow.defn
class WaitForSignal:
    def __init__(self) -> None:
        self.signalled = False

    @workflow.signal
    def end(self) -> None:
        self.signalled = True

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.signalled)


async def _until_closed(client: Client) -> None:
    query = f"TaskQueue = '{TASK_QUEUE}' AND ExecutionStatus = 'Running'"
    while (await client.count_workflows(query)).count:
        await asyncio.sleep(0.5)


async def _quiet() -> None:
    """Until this process (the worker) has used under 5 % of a core for a second: every
    workflow's first task has been done."""
    while True:
        before = time.process_time()
        await asyncio.sleep(1.0)
        if time.process_time() - before < 0.05:
            return


async def _each(n: int, call: Any) -> None:
    limit = asyncio.Semaphore(AT_ONCE)

    async def one(i: int) -> None:
        async with limit:
            await call(f"waiter-{i}")

    await asyncio.gather(*(one(i) for i in range(n)))


async def measure(address: str, server_pid: int, n: int, pollers: PollerBehavior) -> dict[str, Any]:
    client, sender = await Client.connect(address), await Client.connect(address)
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[EndAtOnce, WaitForSignal],
                      workflow_runner=UnsandboxedWorkflowRunner(),
                      max_cached_workflows=MAX_CACHED_WORKFLOWS,
                      workflow_task_poller_behavior=pollers):
        started = time.monotonic()
        await _each(n, lambda wid: sender.start_workflow(EndAtOnce.run, id=f"new-{wid}",
                                                         task_queue=TASK_QUEUE))
        await _until_closed(client)
        new = time.monotonic() - started
        await _each(n, lambda wid: sender.start_workflow(WaitForSignal.run, id=wid,
                                                         task_queue=TASK_QUEUE))
        await _quiet()
        cpu, started = CpuWindow({"server": server_pid, "bench": os.getpid()}), time.monotonic()
        await _each(n, lambda wid: sender.get_workflow_handle(wid).signal(WaitForSignal.end))
        signalled = time.monotonic() - started
        await _until_closed(client)
        closed = time.monotonic() - started
        seconds = {name: fraction * closed for name, fraction in cpu.fractions().items()}
    return {"pollers": repr(pollers), "workflows": n, "new_closed_s": round(new, 1),
            "signalled_s": round(signalled, 1),
            "closed_s": round(closed, 1), "per_s": round(n / closed, 1),
            "server_cpu_ms_per_workflow": round(seconds["server"] * 1000 / n, 2),
            "bench_cpu_ms_per_workflow": round(seconds["bench"] * 1000 / n, 2)}


def run(n: int, pollers: PollerBehavior) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="orch-bench-pollers-") as home, \
            control_plane(Path(home)) as state:
        figures = asyncio.run(measure(state.address, state.server_pid, n, pollers))
    print(f"  {figures['pollers']}: {n} new closed after {figures['new_closed_s']} s; "
          f"{n} cached signalled in {figures['signalled_s']} s, all closed "
          f"after {figures['closed_s']} s ({figures['per_s']} a second); CPU per workflow: "
          f"server {figures['server_cpu_ms_per_workflow']} ms, worker and signals "
          f"{figures['bench_cpu_ms_per_workflow']} ms", flush=True)
    return figures


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--workflows", type=int, default=2000)
    args = parser.parse_args()
    load_before = load_average()
    baseline = run(args.workflows, SDK_DEFAULT)
    figures = run(args.workflows, POLLERS)
    speedup = {burst: round(baseline[burst] / max(figures[burst], 1e-9), 2)
               for burst in ("new_closed_s", "closed_s")}
    print(f"  against the SDK's default pollers: new {speedup['new_closed_s']}x as fast, "
          f"cached {speedup['closed_s']}x")
    figures["baseline"] = baseline
    figures["speedup"] = speedup
    figures["machine"] = {"load_before": load_before, "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
