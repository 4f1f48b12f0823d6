"""What running managed jobs cost the control plane, against the idle control plane.

A Temporal dev server (in memory) and an in-process worker hosting orch's workflows. The
clouds are the scripted FakeCloud of the workflow tests (provisioning cannot run here
for thousands of clusters); the watch is orch's real ``watch_job`` activity, with only
the read of the job on its head replaced by an in-memory answer (on a real cluster that
read is a command the head runs). The run:

1. baseline: the idle control plane for ``--window`` seconds (server and worker CPU);
2. launch ``--jobs`` managed jobs through the client (ids, slots, launches) and wait
   until every one is RUNNING;
3. steady state: the same window with every job running: CPU again, and the history
   events a sample of jobs gained meanwhile (the design says: none);
4. end every job and time until all have SUCCEEDED and torn down.

Prints the figures; asserts nothing. Run from the repository root:

    .venv/bin/python -m bench.managed_jobs_scale [--jobs 200] [--window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client as TemporalClient
from temporalio.worker import Worker

from activities import managed_job
from orch.client import Client
from orch.client.codec import orch_data_converter
from orch.client.managed_jobs import ManagedJobs
from orch.config import venv_binary
from orch.managed_jobs import ManagedJobStatus, managed_job_workflow_id
from orch.records import SEARCH_ATTRIBUTES
from orch.runtime.jobs import JobPoll, JobRecord
from orch.semaphore import SemaphoreSettings
from orch.spec import Task
from orch.status import JobStatus
from tests.workflows.fake_cloud import FakeCloud
from workers.registry import WORKFLOWS, client_activities

TASK_QUEUE = "bench-managed-jobs"
SAMPLE = 20  # jobs whose histories are counted
LAUNCHES_IN_FLIGHT = 20  # clients launching at once (each allocates an id: one Update)


class Heads:
    """The job table of every fake cluster's head: RUNNING until ``end_all``."""

    def __init__(self) -> None:
        self.ended = False
        self.polls = 0

    def poll(self, request: managed_job.WatchRequest, offset: int) -> JobPoll:
        self.polls += 1
        status = JobStatus.SUCCEEDED if self.ended else JobStatus.RUNNING
        record = JobRecord(id=request.cluster_job_id, status=status,
                           submitted_at=datetime.now(UTC))
        return JobPoll(record=record, offset=offset)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [str(venv_binary("temporal")), "server", "start-dev", "--ip", "127.0.0.1",
            "--port", str(port), "--ui-port", str(free_port()), "--headless",
            "--log-level", "error"]
    for name, kind in SEARCH_ATTRIBUTES.items():
        args += ["--search-attribute", f"{name}={kind}"]
    log = open(directory / "temporal.log", "wb")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    return server, f"127.0.0.1:{port}"


async def connect(address: str) -> TemporalClient:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await TemporalClient.connect(address, data_converter=orch_data_converter())
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Meter:
    """CPU seconds of the server process and of this process (the worker) over a window."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    async def measure(self, seconds: float) -> tuple[float, float]:
        server, worker = cpu_seconds(self.server_pid), time.process_time()
        await asyncio.sleep(seconds)
        return cpu_seconds(self.server_pid) - server, time.process_time() - worker


async def history_lengths(client: TemporalClient, job_ids: list[int]) -> list[int]:
    lengths = []
    for job_id in job_ids:
        history = await client.get_workflow_handle(managed_job_workflow_id(job_id)).fetch_history()
        lengths.append(len(history.events))
    return lengths


async def wait_for_all(jobs: ManagedJobs, count: int, status: ManagedJobStatus,
                       timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        listed = await jobs.queue()
        if sum(1 for j in listed if j.status == status) >= count:
            return time.monotonic() - started
        await asyncio.sleep(2)
    raise TimeoutError(f"not all {count} jobs reached {status} in {timeout:.0f} s")


async def bench(count: int, window: float, address: str, server_pid: int) -> None:
    heads = Heads()
    managed_job._poll_head = heads.poll  # the head's job table: in memory
    managed_job._cluster_lost = lambda request: None  # and its instances: always there
    temporal = await connect(address)
    cloud = FakeCloud()
    activities = [a for a in cloud.activities()
                  if getattr(a, "__temporal_activity_definition").name != "watch_job"]
    activities += [managed_job.watch_job, *client_activities(temporal, SemaphoreSettings())]
    meter = Meter(server_pid)
    async with Worker(temporal, task_queue=TASK_QUEUE, workflows=WORKFLOWS,
                      activities=activities, max_concurrent_activities=count + 200,
                      max_cached_workflows=count + 200):
        idle_server, idle_worker = await meter.measure(window)

        jobs = ManagedJobs(Client(temporal, task_queue=TASK_QUEUE))
        limit = asyncio.Semaphore(LAUNCHES_IN_FLIGHT)

        async def launch(n: int) -> int:
            async with limit:
                return await jobs.launch([Task(name=f"job{n}", run="sleep infinity")])

        started = time.monotonic()
        job_ids = await asyncio.gather(*(launch(n) for n in range(count)))
        submitted = time.monotonic() - started
        running = await wait_for_all(jobs, count, ManagedJobStatus.RUNNING, 3600)
        await asyncio.sleep(min(30.0, window))  # let the watches ramp up to their interval

        sample = job_ids[:SAMPLE]
        before = await history_lengths(temporal, sample)
        polls = heads.polls
        busy_server, busy_worker = await meter.measure(window)
        polls = heads.polls - polls
        after = await history_lengths(temporal, sample)

        heads.ended = True
        ended = await wait_for_all(jobs, count, ManagedJobStatus.SUCCEEDED, 3600)

    def pct(cpu: float) -> str:
        return f"{100 * cpu / window:5.1f} %"

    gained = [a - b for a, b in zip(after, before, strict=True)]
    extra = (busy_server + busy_worker) - (idle_server + idle_worker)
    print(f"managed jobs: {count}, window {window:.0f} s, {os.cpu_count()} cores")
    print(f"  launch: {count} submitted in {submitted:.1f} s, all RUNNING after "
          f"{submitted + running:.1f} s ({count / (submitted + running):.1f} jobs/s)")
    print("  CPU (of one core)     server    worker")
    print(f"    idle (baseline)   {pct(idle_server)}   {pct(idle_worker)}")
    print(f"    {count} running  {pct(busy_server)}   {pct(busy_worker)}")
    per_job = extra / window / count
    print(f"  per running job: {1000 * per_job:.2f} ms CPU per second above the baseline "
          f"(2,000 jobs at this rate: {100 * 2000 * per_job:.0f} % of one core); "
          f"{polls / window:.1f} head polls/s in all")
    print(f"  history events gained in the window by {len(sample)} jobs: {sum(gained)} "
          f"(max {max(gained)} per job)")
    print(f"  end: all SUCCEEDED and torn down {ended:.1f} s after their jobs ended")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--window", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-jobs-") as directory:
        os.environ["ORCH_HOME"] = directory
        server, address = start_server(Path(directory))
        try:
            asyncio.run(bench(args.jobs, args.window, address, server.pid))
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
