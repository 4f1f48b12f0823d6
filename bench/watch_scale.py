"""The steady state of N running managed jobs, without launching them: N real watches on
the real poll path, against the idle control plane.

``bench/managed_jobs_scale.py`` reaches its steady state only after N launches, which on
a 2-core machine take far longer than the steady state they lead to. This bench makes the
same steady state directly: N clusters on the simulated cloud (one node each, provisioned
through the provider, no Temporal), a RUNNING job in each head's job table, then N
workflows that each run orch's ``watch_job`` activity, as ManagedJobWorkflow does (same
options: heartbeat timeout, retry policy), on a worker with the production worker's slot
settings. Each watch long-polls its head over SSH (one local sshd serving every simulated
head) and runs the head's real job CLI. Once every head has answered its watch's first
poll (``all_polling_s`` after the first start), and ``SETTLE_S`` more, measured over
``--window`` seconds: CPU of the dev server and of the worker (this process), worker
RSS, Temporal actions per second, CPU of the simulated heads (what the nodes of a real
cloud would spend); then ``--ended`` jobs end on their heads and the time until their
watches report it. Baseline in the same run: the idle control plane. Nothing asserted;
the last line is JSON. As root, from the repository root:

    .venv/bin/python -m bench.watch_scale [--jobs 2000] [--window 120]
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
from temporalio.client import Client as TemporalClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.managed_job import watch_job
from bench.sim_cloud import (
    CpuWindow,
    HeadsCpu,
    SimCloud,
    control_plane,
    exit_on_sigterm,
    load_average,
    regions,
    rss_mb,
)
from bench.sim_figures import percentile, server_actions
from orch.client.codec import orch_data_converter
from orch.clouds.base import ProvisionConfig
from orch.clouds.simulated import SIMULATED
from orch.clouds.simulated_node import end_job
from orch.contracts.watch import WATCH_JOB, WatchRequest, WatchResult
from orch.runtime import jobs
from orch.runtime.job_records import JobRecord
from orch.server import METRICS_PORT_ENV
from orch.status import JobStatus
from tests.fakes.sshd import free_port
from workers.__main__ import MAX_CONCURRENT_ACTIVITIES
from workflows.options import WATCH_CALL

TASK_QUEUE = "bench-watch-scale"
AT_ONCE = 50
SETTLE_S = 30.0  # after the last first poll, before the window: the ramp's tail


@workflow.defn
class WatchOnly:
    @workflow.run
    async def run(self, request: WatchRequest) -> WatchResult:
        return await workflow.execute_activity(WATCH_JOB, request, result_type=WatchResult,
                                               **WATCH_CALL)


def make_heads(cloud: SimCloud, n: int) -> list[WatchRequest]:
    """N one-node clusters, each head with job 1 RUNNING; the watch request of each."""
    provider, region = cloud.provider(), "sim-0"
    requests = []
    for i in range(n):
        name = f"w{i}"
        provider.run_instances(ProvisionConfig(cluster_name=name, num_nodes=1, region=region,
                                               zone="sim-0a"))
    time.sleep(cloud.config.boot_s)
    for i in range(n):
        info = provider.get_cluster_info(region, f"w{i}")
        head = info.nodes[0]
        root = provider.node_home(head.internal_ip) / jobs.JOBS_PATH
        with jobs.locked(1, root):
            jobs.write(JobRecord(id=1, status=JobStatus.RUNNING, submitted_at=jobs.now(),
                                 started_at=jobs.now()), root)
        requests.append(WatchRequest(job_id=i, task_index=0, attempt=1, cluster_name=f"w{i}",
                                     cloud=SIMULATED, region=region, head=head, num_nodes=1,
                                     cluster_job_id=1))
    return requests


async def first_polls(cloud: SimCloud, requests: list[WatchRequest]) -> None:
    """Until every head has answered its watch's first poll (the poll marks the job)."""
    provider = cloud.provider()
    unpolled = [jobs.job_dir(1, provider.node_home(r.head.internal_ip) / jobs.JOBS_PATH)
                / jobs.POLLED_MARK for r in requests]
    while unpolled:
        await asyncio.sleep(5)
        unpolled = [mark for mark in unpolled if not mark.exists()]


async def measure(address: str, server_pid: int, metrics_port: int, cloud: SimCloud,
                  requests: list[WatchRequest], window: float, ended: int) -> dict[str, Any]:
    client = await TemporalClient.connect(address, data_converter=orch_data_converter())
    pids = {"server": server_pid, "worker": os.getpid()}
    figures: dict[str, Any] = {"jobs": len(requests), "window_s": window}
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[WatchOnly],
                      activities=[watch_job], max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
                      workflow_runner=UnsandboxedWorkflowRunner()):
        idle = CpuWindow(pids)
        await asyncio.sleep(30)
        idle_cpu, idle_rss = idle.fractions(), rss_mb(os.getpid())
        limit = asyncio.Semaphore(AT_ONCE)

        async def start(request: WatchRequest) -> None:
            async with limit:
                await client.start_workflow(WatchOnly.run, request, task_queue=TASK_QUEUE,
                                            id=f"watch-{request.job_id}")

        started = time.monotonic()
        await asyncio.gather(*(start(r) for r in requests))
        figures["start_s"] = round(time.monotonic() - started, 1)
        await first_polls(cloud, requests)
        figures["all_polling_s"] = round(time.monotonic() - started, 1)
        await asyncio.sleep(SETTLE_S)
        actions, busy = server_actions(metrics_port), CpuWindow(pids)
        heads = HeadsCpu(cloud.sshd_pid())
        await asyncio.sleep(window)
        cpu = busy.fractions()
        figures["heads_cpu_core_frac"] = round(heads.fraction(), 4)
        figures["actions_per_s"] = round((server_actions(metrics_port) - actions) / window, 2)
        for name in ("server", "worker"):
            figures[f"{name}_cpu_core_frac"] = round(cpu[name], 4)
            figures[f"idle_{name}_cpu_core_frac"] = round(idle_cpu[name], 4)
        figures["cpu_core_frac"] = round(cpu["server"] + cpu["worker"], 4)
        figures["worker_rss_mb"] = round(rss_mb(os.getpid()), 1)
        figures["rss_mb_per_job"] = round((rss_mb(os.getpid()) - idle_rss) / len(requests), 3)

        provider, seen = cloud.provider(), []
        for request in requests[:ended]:
            at = time.time()
            end_job(provider.node_home(request.head.internal_ip), 1, JobStatus.SUCCEEDED)
            handle = client.get_workflow_handle(f"watch-{request.job_id}")
            await handle.result()
            seen.append(time.time() - at)
        figures["end_seen_p50_s"] = round(percentile(seen, 50), 2)
        figures["end_seen_max_s"] = round(max(seen), 2)
    # The other watches are left to the worker's shutdown (which cancels them) and the
    # dev server's (whose database goes with the run's directory): terminating 2,000
    # workflows at once outlasts the RPC timeout on a loaded machine.
    return figures


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--ended", type=int, default=20)
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="orch-bench-watch-") as directory:
        root, metrics_port = Path(directory), free_port()
        with SimCloud(root / "cloud", regions(1, capacity=10 * args.jobs),
                      boot_s=0.0) as cloud, \
                control_plane(root / "home", **{METRICS_PORT_ENV: str(metrics_port)}) as state:
            requests = make_heads(cloud, args.jobs)
            figures = asyncio.run(measure(state.address, state.server_pid, metrics_port,
                                          cloud, requests, args.window,
                                          min(args.ended, args.jobs)))
    above = figures["cpu_core_frac"] - figures["idle_server_cpu_core_frac"] - figures[
        "idle_worker_cpu_core_frac"]
    print(f"{figures['jobs']} watches: server {100 * figures['server_cpu_core_frac']:.1f} % + "
          f"worker {100 * figures['worker_cpu_core_frac']:.1f} % of one core "
          f"({1000 * above / figures['jobs']:.3f} ms per job per second above idle); worker "
          f"RSS {figures['worker_rss_mb']} MB ({figures['rss_mb_per_job']} MB per job); "
          f"{figures['actions_per_s']} actions/s; the simulated heads (sshd sessions, waits, "
          f"job CLI) {100 * figures['heads_cpu_core_frac']:.1f} %; end seen p50 "
          f"{figures['end_seen_p50_s']} s, max {figures['end_seen_max_s']} s")
    figures["machine"] = {"cpus": os.cpu_count(), "load_before": load_before,
                          "load_after": load_average()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
