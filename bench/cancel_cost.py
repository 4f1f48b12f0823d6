"""What cancelling managed jobs costs the control plane, per job, at N jobs and at N/10.

For N jobs (default 300) on the simulated cloud, with the same cloud and control plane as
``bench/managed_jobs_scale.py``: launch them all, wait until they are RUNNING, then run
``orch jobs cancel -a -y`` and wait until every job is CANCELLED and every simulated
cluster is gone. Measured over the cancel:

* the time, and the rate in jobs a second (and when the CLI returned, and when every job
  was CANCELLED);
* the CPU of the dev server, of the worker and of the simulated heads (their sshd
  sessions and what they run, which a real cloud's nodes would spend), as fractions of
  one core, and how busy the machine's cores were (every process);
* the dev server's requests to its database per cancelled job, by operation (its
  Prometheus metrics; ``UpdateWorkflowExecution`` is a write of a workflow's state, the
  unit a cancel-all of 2,000 in a minute has to be counted in);
* the history events that a sample of the cancelled jobs gained after their cancel
  signal, those of the TeardownWorkflows the cancel started (a sample's, per run; a
  cancelled job hands its cluster to the bulk teardown instead, unless buckets are
  mounted on it), and the bulk teardown's, per job.

The same run at N/10 first is the baseline: what each cancel costs should not grow with
N. Prints the figures, then one JSON line; asserts nothing. From the repository root, as
root (the simulated cloud starts an sshd):

    .venv/bin/python -m bench.cancel_cost [--jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecution

from bench.managed_jobs_scale import cancel_all, count, jobs_setup, launch_all, wait_count
from bench.sim_cloud import (
    CpuWindow,
    HeadsCpu,
    MachineCpu,
    SimCloud,
    exit_on_sigterm,
    load_average,
)
from bench.sim_figures import persistence_requests
from orch.bulk_teardown import BULK_TEARDOWN_ID
from orch.client import Client
from orch.managed_jobs import CANCEL_SIGNAL, ManagedJobStatus, managed_job_workflow_id
from orch.records import TEARDOWN_WORKFLOW
from orch.server import ControlPlane

SAMPLE = 20  # jobs, and teardowns, whose histories are read
STAGE_SAMPLE = 50  # jobs, spread over the cancel-all, whose stages are timed
OPERATIONS_SHOWN = 6


def _name(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


async def _history(client: Client, run: WorkflowExecution) -> list[HistoryEvent]:
    handle = client.temporal.get_workflow_handle(run.id, run_id=run.run_id)
    return list((await handle.fetch_history()).events)


async def _after_cancel(client: Client, job_id: int) -> list[HistoryEvent]:
    """A job's history from its cancel signal on (empty without one)."""
    history = await client.temporal.get_workflow_handle(
        managed_job_workflow_id(job_id)).fetch_history()
    events = list(history.events)
    signals = (i for i, e in enumerate(events)
               if e.workflow_execution_signaled_event_attributes.signal_name == CANCEL_SIGNAL)
    return events[next(signals, len(events)):]


async def _events_after_cancel(client: Client, job_id: int) -> Counter[str]:
    """Event types of a job's history from its cancel signal on."""
    return Counter(map(_name, await _after_cancel(client, job_id)))


# A cancelled job's way, from its history's events: (stage, the event that ends it). Each
# stage starts where the one before ended; the first starts when the CLI was started.
STAGES = (
    ("its cancel signal arrived", "WORKFLOW_EXECUTION_SIGNALED"),
    ("its workflow task started", "WORKFLOW_TASK_STARTED"),
    ("the job closed", "WORKFLOW_EXECUTION_COMPLETED"),
)


async def _stages(client: Client, job_id: int, started: float) -> list[float] | None:
    """Seconds each of STAGES took for one cancelled job (None: its history has not them
    all)."""
    ends: list[float] = []
    for event in await _after_cancel(client, job_id):
        if len(ends) == len(STAGES):
            break
        if _name(event) == STAGES[len(ends)][1]:
            ends.append(event.event_time.ToMicroseconds() / 1e6)
    if len(ends) < len(STAGES):
        return None
    return [round(end - start, 2) for start, end in zip([started, *ends[:-1]], ends, strict=True)]


def _percentiles(rows: list[list[float]]) -> dict[str, list[float]]:
    """p50 and max of each stage over the sampled jobs."""
    out = {}
    for i, (stage, _) in enumerate(STAGES):
        values = sorted(row[i] for row in rows)
        out[stage] = [values[len(values) // 2], values[-1]] if values else []
    return out


async def _teardown_events(client: Client, since: float) -> tuple[int, Counter[str]]:
    """Event types of the teardowns started since ``since`` (a sample), and how many."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    counted: Counter[str] = Counter()
    runs = 0
    query = f"WorkflowType = '{TEARDOWN_WORKFLOW}' AND StartTime >= '{started}'"
    async for run in client.temporal.list_workflows(query, limit=SAMPLE):
        runs += 1
        counted.update(map(_name, await _history(client, run)))
    return runs, counted


async def _bulk_teardown_events(client: Client, since: float) -> Counter[str]:
    """Event types of the bulk teardown's runs recorded since ``since``, all of them."""
    counted: Counter[str] = Counter()
    async for run in client.temporal.list_workflows(f"WorkflowId = '{BULK_TEARDOWN_ID}'"):
        counted.update(_name(e) for e in await _history(client, run)
                       if e.event_time.ToSeconds() >= since)
    return counted


def _per(counts: Counter[str] | dict[str, float], n: int, *names: str) -> dict[str, float]:
    return {name: round(counts.get(name, 0) / max(n, 1), 2) for name in names}


async def measure(n: int, home: Path, cloud: SimCloud, metrics_port: int) -> dict[str, Any]:
    state = ControlPlane(home).state()
    assert state is not None and state.worker_pid is not None
    pids = {"server": state.server_pid, "worker": state.worker_pid}
    figures: dict[str, Any] = {"jobs": n}
    async with await Client.connect() as client:
        job_ids = await launch_all(client, n)
        await wait_count(client, ManagedJobStatus.RUNNING, n, timeout=7200)
        await asyncio.sleep(20)  # the watches' first polls are behind them
        before, cpu = persistence_requests(metrics_port), CpuWindow(pids)
        heads, machine = HeadsCpu(cloud.sshd_pid()), MachineCpu()
        since, started = time.time(), time.monotonic()
        result = cancel_all(home)
        if result.returncode != 0:
            raise RuntimeError(f"orch jobs cancel -a failed: {result.stdout}{result.stderr}")
        figures["cli_s"] = round(time.monotonic() - started, 1)
        await wait_count(client, ManagedJobStatus.CANCELLED, n, timeout=3600, every=0.5)
        figures["all_cancelled_s"] = round(time.monotonic() - started, 1)
        while cloud.provider().clusters():
            await asyncio.sleep(0.5)
        figures["cancel_s"] = round(time.monotonic() - started, 1)
        fractions = cpu.fractions()
        after = persistence_requests(metrics_port)
        figures["jobs_per_s"] = round(n / figures["cancel_s"], 2)
        figures["heads_cpu_core_frac"] = round(heads.fraction(), 3)
        figures["machine_busy_frac"] = round(machine.fraction(), 3)
        figures["server_cpu_core_frac"] = round(fractions["server"], 3)
        figures["worker_cpu_core_frac"] = round(fractions["worker"], 3)
        figures["all_cancelled"] = await count(client, ManagedJobStatus.CANCELLED) == n
        spent = {op: after[op] - before.get(op, 0.0) for op in after}
        busiest = sorted(spent, key=lambda op: -spent[op])[:OPERATIONS_SHOWN]
        figures["db_requests_per_job"] = _per(spent, n, *busiest)
        job_events: Counter[str] = Counter()
        for job_id in job_ids[:SAMPLE]:
            job_events += await _events_after_cancel(client, job_id)
        spread = job_ids[::max(1, n // STAGE_SAMPLE)]
        rows = [row for job_id in spread if (row := await _stages(client, job_id, since))]
        figures["stages_p50_max_s"] = _percentiles(rows)
        figures["job_events_per_cancel"] = _per(
            job_events, min(SAMPLE, n), "WORKFLOW_TASK_COMPLETED",
            "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", "START_CHILD_WORKFLOW_EXECUTION_INITIATED",
            "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED")
        runs, teardown_events = await _teardown_events(client, since)
        figures["teardowns"] = runs
        figures["teardown_events_per_cancel"] = _per(
            teardown_events, runs, "WORKFLOW_TASK_COMPLETED", "ACTIVITY_TASK_SCHEDULED")
        figures["bulk_teardown_events_per_job"] = _per(
            await _bulk_teardown_events(client, since), n, "WORKFLOW_EXECUTION_SIGNALED",
            "WORKFLOW_TASK_COMPLETED", "ACTIVITY_TASK_SCHEDULED",
            "SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED")
    return figures


def run(n: int) -> dict[str, Any]:
    with jobs_setup(n, "orch-bench-cancel-") as (home, cloud, metrics_port):
        return asyncio.run(measure(n, home, cloud, metrics_port))


def report(figures: dict[str, Any]) -> None:
    writes = figures["db_requests_per_job"].get("UpdateWorkflowExecution", 0.0)
    print(f"  {figures['jobs']} jobs cancelled, every cluster gone, in {figures['cancel_s']} s "
          f"({figures['jobs_per_s']} a second; the CLI done after {figures['cli_s']} s, every "
          f"job CANCELLED after {figures['all_cancelled_s']} s); server "
          f"{figures['server_cpu_core_frac']:.0%} "
          f"+ worker {figures['worker_cpu_core_frac']:.0%} + simulated heads "
          f"{figures['heads_cpu_core_frac']:.0%} of a core, the machine's cores "
          f"{figures['machine_busy_frac']:.0%} busy; {writes} workflow-state writes per job",
          flush=True)
    print(f"    database requests per job: {figures['db_requests_per_job']}")
    print(f"    a job's events after its cancel: {figures['job_events_per_cancel']}")
    print("    a job's way, seconds (p50, max), each stage from the end of the one before: "
          f"{figures['stages_p50_max_s']}")
    print(f"    TeardownWorkflows: {figures['teardowns']} (a sample's events each: "
          f"{figures['teardown_events_per_cancel']})")
    print(f"    the bulk teardown's events per job: {figures['bulk_teardown_events_per_job']}",
          flush=True)


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    load_before = load_average()
    baseline = run(max(args.jobs // 10, 1))
    report(baseline)
    figures = run(args.jobs)
    report(figures)
    ratio = figures["db_requests_per_job"].get("UpdateWorkflowExecution", 0.0) / max(
        baseline["db_requests_per_job"].get("UpdateWorkflowExecution", 0.0), 1e-9)
    print(f"  writes per job at {args.jobs} against {baseline['jobs']}: {ratio:.2f}x")
    figures["baseline"] = baseline
    figures["writes_per_job_ratio"] = round(ratio, 2)
    figures["machine"] = {"load_before": load_before, "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
