"""2,000 managed jobs on one worker and the embedded dev server, on the simulated cloud.

Everything is orch's real path except the cloud: the control plane is the embedded one
(``orch.server.ControlPlane``: the dev server and ``python -m workers``), jobs are
launched through the client, each gets its own cluster from the simulated cloud
(``orch.clouds.simulated``: every call pays a latency, an instance boots), and each job is
watched over SSH on its head by orch's real watch, through one local sshd serving every
simulated head, with the head's real job table and CLI. The run, for N jobs:

1. idle control plane: CPU of server and worker, worker RSS;
2. launch N jobs (16 launch permits) and wait until all are RUNNING: time to admit all,
   the most provisioning rounds ever under way at once (from the cloud's call log), and
   the wait from a permit given back to the next launch's first cloud call (p50/p95);
3. steady state, all N running, over ``--window`` seconds: CPU of server and worker (as
   a fraction of one core), worker RSS per job (above idle), Temporal actions per second
   (the dev server's own count), history events gained per job per hour (a sample);
4. a job's end seen: ``--ended`` jobs end on their heads; then the worker is SIGKILLed,
   as many others end and the worker is started again: how long after each end its watch
   reported it (from the histories), without and with a crash;
5. ``orch jobs cancel -a -y``: time until every other job is CANCELLED and every simulated
   cluster is gone.

The same run at N/10 first is the baseline (cost per job should stay flat as N grows).
Prints the figures, then one JSON line; asserts nothing. From the repository root, as
root (it starts an sshd):

    .venv/bin/python -m bench.managed_jobs_scale [--jobs 2000] [--window 120]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.sim_cloud import (
    CpuWindow,
    HeadsCpu,
    MachineCpu,
    SimCloud,
    control_plane,
    exit_on_sigterm,
    load_average,
    regions,
    rss_mb,
)
from bench.sim_figures import (
    peak_overlap,
    percentile,
    permit_waits,
    provisioning,
    server_actions,
)
from orch.client import Client
from orch.client.managed_jobs import ManagedJobs
from orch.clouds.simulated_node import end_job
from orch.managed_jobs import ManagedJobStatus, managed_job_workflow_id
from orch.server import METRICS_PORT_ENV, ControlPlane
from orch.spec import Task
from orch.status import JobStatus
from tests.fakes.sshd import free_port

PERMITS = 16
LAUNCHING_AT_ONCE = 8  # client calls in flight: each allocates an id with an Update, and a
# workflow takes 10 Updates in flight at most
HISTORY_SAMPLE = 20
# A fast cloud: 16 permits admit 2,000 jobs in 10 minutes only if a launch holds its
# permit for less than 4.8 s, orch's own time included.
LATENCY_S = {"run_instances": 0.2, "terminate_instances": 0.2, "default": 0.05}
BOOT_S = 0.5
_JOB_CLUSTER = re.compile(r"job-(\d+)-")


async def count(client: Client, status: ManagedJobStatus) -> int:
    query = f"WorkflowType = 'ManagedJobWorkflow' AND OrchJobStatus = '{status}'"
    return (await client.temporal.count_workflows(query)).count


async def wait_count(client: Client, status: ManagedJobStatus, wanted: int,
                     timeout: float, every: float = 2.0) -> float:
    started = time.monotonic()
    while await count(client, status) < wanted:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"fewer than {wanted} jobs {status} after {timeout:.0f} s")
        await asyncio.sleep(every)
    return time.monotonic() - started


async def history_lengths(client: Client, job_ids: list[int]) -> list[int]:
    lengths = []
    for job_id in job_ids:
        handle = client.temporal.get_workflow_handle(managed_job_workflow_id(job_id))
        lengths.append(len((await handle.fetch_history()).events))
    return lengths


async def watch_ended_at(client: Client, job_id: int) -> float | None:
    """When the job's watch activity completed (epoch seconds), from its history."""
    history = await client.temporal.get_workflow_handle(
        managed_job_workflow_id(job_id)).fetch_history()
    watches = {e.event_id for e in history.events
               if e.activity_task_scheduled_event_attributes.activity_type.name == "watch_job"}
    for event in history.events:
        done = event.activity_task_completed_event_attributes
        if done.scheduled_event_id in watches:
            return event.event_time.ToDatetime().timestamp()
    return None


async def end_and_see(client: Client, cloud: SimCloud, heads: dict[int, str],
                      crash: ControlPlane | None) -> list[float]:
    """End the jobs of ``heads`` on their heads (with the worker killed first when
    ``crash``); seconds from each end until its watch reported it."""
    if crash is not None:
        state = crash.state()
        assert state is not None and state.worker_pid is not None
        os.kill(state.worker_pid, signal.SIGKILL)
    provider = cloud.provider()
    ended = {}
    for job_id, ip in heads.items():
        ended[job_id] = time.time()
        end_job(provider.node_home(ip), 1, JobStatus.SUCCEEDED)
    if crash is not None:
        await asyncio.sleep(2)
        crash.ensure()  # a new worker
    seen: list[float] = []
    deadline = time.monotonic() + 600
    for job_id, at in ended.items():
        while (done := await watch_ended_at(client, job_id)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id}'s end was never seen")
            await asyncio.sleep(1)
        seen.append(done - at)
    return seen


def cancel_all(home: Path) -> subprocess.CompletedProcess[str]:
    orch = Path(sys.executable).with_name("orch")
    return subprocess.run([str(orch), "jobs", "cancel", "-a", "-y"], capture_output=True,
                          text=True, env={**os.environ, "ORCH_HOME": str(home)}, timeout=3600)


async def launch_all(client: Client, n: int) -> list[int]:
    jobs = ManagedJobs(client)
    limit = asyncio.Semaphore(LAUNCHING_AT_ONCE)

    async def launch(i: int) -> int:
        async with limit:
            return await jobs.launch([Task(name=f"sim{i}", run="train")])

    return await asyncio.gather(*(launch(i) for i in range(n)))


async def measure(n: int, window: float, ended: int, crash: bool, home: Path,
                  cloud: SimCloud, metrics_port: int) -> dict[str, Any]:
    plane = ControlPlane(home)
    state = plane.state()
    assert state is not None and state.worker_pid is not None
    pids = {"server": state.server_pid, "worker": state.worker_pid}
    figures: dict[str, Any] = {"jobs": n, "permits": PERMITS}
    async with await Client.connect() as client:
        await asyncio.sleep(5)
        idle_cpu = CpuWindow(pids)
        await asyncio.sleep(min(30.0, window))
        idle = sum(idle_cpu.fractions().values())
        idle_rss = rss_mb(state.worker_pid)
        started, ramp = time.monotonic(), CpuWindow(pids)
        heads_cpu, machine = HeadsCpu(cloud.sshd_pid()), MachineCpu()
        job_ids = await launch_all(client, n)
        await wait_count(client, ManagedJobStatus.RUNNING, n, timeout=7200)
        figures["admit_s"] = round(time.monotonic() - started, 1)
        figures["launch_cpu_s_per_job"] = round(
            sum(ramp.fractions().values()) * figures["admit_s"] / n, 3)
        # What else the ramp cost: the simulated heads (CPU a cloud's nodes would spend),
        # and every process on the machine (its cores, busy, over the ramp).
        figures["heads_cpu_s_per_job"] = round(heads_cpu.fraction() * figures["admit_s"] / n, 3)
        figures["machine_cpu_s_per_job"] = round(
            machine.fraction() * (os.cpu_count() or 1) * figures["admit_s"] / n, 3)
        rounds = provisioning(cloud.provider().calls())
        waits = permit_waits(rounds, PERMITS)
        figures["peak_launching"] = peak_overlap(rounds)
        # None when the permits were never all held: no launch ever waited for one.
        figures["p50_permit_to_launching_s"] = round(percentile(waits, 50), 3) if waits else None
        figures["p95_permit_to_launching_s"] = round(percentile(waits, 95), 3) if waits else None

        await asyncio.sleep(min(30.0, window))  # the watches' first polls are behind them
        sample = job_ids[:HISTORY_SAMPLE]
        before = await history_lengths(client, sample)
        actions = server_actions(metrics_port)
        cpu = CpuWindow(pids)
        await asyncio.sleep(window)
        fractions = cpu.fractions()
        figures["actions_per_s"] = round((server_actions(metrics_port) - actions) / window, 1)
        gained = sum(after - b for after, b in zip(await history_lengths(client, sample),
                                                    before, strict=True))
        figures["server_cpu_core_frac"] = round(fractions["server"], 3)
        figures["worker_cpu_core_frac"] = round(fractions["worker"], 3)
        figures["cpu_core_frac"] = round(fractions["server"] + fractions["worker"], 3)
        figures["idle_cpu_core_frac"] = round(idle, 3)
        figures["worker_rss_mb"] = round(rss_mb(state.worker_pid), 1)
        figures["rss_mb_per_job"] = round((rss_mb(state.worker_pid) - idle_rss) / n, 3)
        figures["events_per_job_hour"] = round(gained / len(sample) * 3600 / window, 2)

        heads = {int(m.group(1)): ip for cluster, _, ip in cloud.provider().clusters()
                 if (m := _JOB_CLUSTER.match(cluster))}
        chosen = sorted(heads)[-2 * ended:]
        seen = await end_and_see(client, cloud, {j: heads[j] for j in chosen[:ended]}, None)
        figures["end_seen_p50_s"] = round(percentile(seen, 50), 2)
        figures["end_seen_max_s"] = round(max(seen), 2)
        if crash:
            seen = await end_and_see(client, cloud, {j: heads[j] for j in chosen[ended:]},
                                     plane)
            figures["end_seen_after_crash_max_s"] = round(max(seen), 2)
        left = n - len(chosen) if crash else n - ended
        await wait_count(client, ManagedJobStatus.SUCCEEDED, n - left, timeout=600, every=1)

        started = time.monotonic()
        result = cancel_all(home)
        if result.returncode != 0:
            raise RuntimeError(f"orch jobs cancel -a failed: {result.stdout}{result.stderr}")
        with contextlib.suppress(TimeoutError):  # then counted below
            await wait_count(client, ManagedJobStatus.CANCELLED, left, timeout=3600, every=0.5)
        while cloud.provider().clusters() and time.monotonic() - started < 3600:
            await asyncio.sleep(0.5)
        figures["cancel_s"] = round(time.monotonic() - started, 1)
        figures["cancelled"] = await count(client, ManagedJobStatus.CANCELLED)
        figures["all_cancelled"] = figures["cancelled"] == left
        figures["clusters_left"] = len(cloud.provider().clusters())
    return figures


@contextlib.contextmanager
def jobs_setup(n: int, prefix: str) -> Iterator[tuple[Path, SimCloud, int]]:
    """For ``n`` managed jobs: a simulated cloud (4 regions of 3 zones, the latencies
    above) and an embedded control plane with ``PERMITS`` launch permits, job slots for
    all, and the dev server's metrics on a port of its own; yields the control plane's
    home, the cloud and that port, all in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        root = Path(directory)
        metrics_port = free_port()
        with SimCloud(root / "cloud", regions(4, zones=3), latency_s=LATENCY_S,
                      boot_s=BOOT_S) as cloud, \
                control_plane(root / "home", ORCH_LAUNCH_PERMITS=str(PERMITS),
                              ORCH_JOB_SLOTS=str(max(n, 2000)),
                              **{METRICS_PORT_ENV: str(metrics_port)}):
            yield root / "home", cloud, metrics_port


def run(n: int, window: float, ended: int, crash: bool) -> dict[str, Any]:
    ended = max(1, min(ended, n // 4))  # twice that many end on purpose; the rest cancel
    with jobs_setup(n, "orch-bench-scale-") as (home, cloud, metrics_port):
        return asyncio.run(measure(n, window, ended, crash, home, cloud, metrics_port))


def report(figures: dict[str, Any]) -> None:
    n = figures["jobs"]
    print(f"  {n} jobs: all RUNNING after {figures['admit_s']} s "
          f"({figures['launch_cpu_s_per_job']} CPU s of server + worker per launch, "
          f"{figures['heads_cpu_s_per_job']} s of the simulated heads, "
          f"{figures['machine_cpu_s_per_job']} s of the whole machine); at most "
          f"{figures['peak_launching']} provisioning at once ({figures['permits']} permits); "
          f"permit given back -> next launch's first cloud call p50 "
          f"{figures['p50_permit_to_launching_s']} s, p95 {figures['p95_permit_to_launching_s']} s")
    above = figures["cpu_core_frac"] - figures["idle_cpu_core_frac"]
    print(f"  steady: server {100 * figures['server_cpu_core_frac']:.1f} % + worker "
          f"{100 * figures['worker_cpu_core_frac']:.1f} % of one core (idle: "
          f"{100 * figures['idle_cpu_core_frac']:.1f} %; {1000 * above / n:.3f} ms CPU per "
          f"job per second above it); worker RSS "
          f"{figures['worker_rss_mb']} MB ({figures['rss_mb_per_job']} MB per job above idle); "
          f"{figures['actions_per_s']} Temporal actions/s; "
          f"{figures['events_per_job_hour']} history events per job per hour")
    crash = (f", after a worker SIGKILL at most {figures['end_seen_after_crash_max_s']} s"
             if "end_seen_after_crash_max_s" in figures else "")
    print(f"  a job's end seen by its watch: p50 {figures['end_seen_p50_s']} s, max "
          f"{figures['end_seen_max_s']} s{crash}")
    print(f"  cancel -a: {figures['cancelled']} CANCELLED (all: {figures['all_cancelled']}), "
          f"{figures['clusters_left']} clusters left, after {figures['cancel_s']} s")


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--ended", type=int, default=20,
                        help="jobs ended to time how soon their end is seen (twice: "
                             "with and without a worker crash)")
    parser.add_argument("--no-crash", action="store_true")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    load_before = load_average()
    baseline = None
    if not args.no_baseline:
        small = max(2, args.jobs // 10)
        print(f"baseline: {small} jobs", flush=True)
        baseline = run(small, args.window, args.ended, not args.no_crash)
        report(baseline)
    print(f"{args.jobs} jobs", flush=True)
    figures = run(args.jobs, args.window, args.ended, not args.no_crash)
    report(figures)
    figures["baseline"] = baseline
    figures["machine"] = {"cpus": os.cpu_count(), "load_before": load_before,
                          "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
