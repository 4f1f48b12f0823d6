"""``python -m workers``: run an orch worker in the foreground until SIGTERM or Ctrl-C;
``python -m workers --check``: exit 0 when a worker of this host polls (``workers.health``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor

from temporalio.worker import (
    PollerBehaviorAutoscaling,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from orch.client import connect_temporal
from orch.config import TASK_QUEUE, TemporalSettings
from orch.process_exit import exit_without_finalizing
from orch.settings import load_settings
from orch.spec import SpecError
from workers.gc_pauses import tune_garbage_collection
from workers.health import MAX_AGE_S, run_check, worker_identity
from workers.registry import WORKFLOWS, activities
from workers.watch_takeover import take_over_orphaned_watches

# Blocking activities (cloud SDKs, SSH) run in threads; the managed-job watch is async and
# holds its slot for a job's whole life, so the slot limit is far above the thread count.
MAX_ACTIVITY_THREADS = 128
MAX_CONCURRENT_ACTIVITIES = 4096
# Workflows kept in memory between their tasks (the SDK's default is 1,000). Each of
# 2,000 running managed jobs is a workflow; past the cache, every signal or activity result
# for an evicted one replays its whole history first (with the 1,000 default, 2,000 jobs
# were admitted at 0.5 a second, 200 at 1 a second). A cached job costs the worker well
# under a megabyte (bench/managed_jobs_scale.py measures it).
MAX_CACHED_WORKFLOWS = 10_000
# Polls in flight for each kind of task: as many as the server's feedback asks for, up to
# 100, instead of the SDK's fixed 5. Of those 5, one polls the shared queue, where the tasks
# of workflows new to the worker go (a launch starts several child workflows): 2,000
# workflows started at once and ending in their first task closed in 39.4 s with 5 polls,
# in 25.4 s with the polls scaling. Bursts on the worker's own (sticky) queue, such as a
# cancel-all of cached jobs, gain nothing (20.2 s against 22.8 s, noise). Measured by
# ``bench/workflow_pollers.py``.
POLLERS = PollerBehaviorAutoscaling(maximum=100)
SANDBOX_ENV = "ORCH_WORKFLOW_SANDBOX"


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """How the worker runs workflow code: outside the SDK's sandbox unless asked.

    The sandbox re-imports a workflow's modules for every new run and proxies the
    standard library on every call. Measured with ``bench.managed_jobs_scale --jobs 80``
    (two runs each way, README, Performance): 0.52 s of server + worker CPU per launch
    without it against 0.59 s with it, and 0.57 MB of worker memory per running job
    against 0.84 MB; CPU per launch is what caps how fast 2,000 jobs are admitted.
    What the sandbox would catch at run time is caught before release instead: every
    test worker runs sandboxed (the cluster tests with no workflow cache, so that each
    workflow task replays the whole history), and the recorded histories of every
    release replay in the sandbox (``tests/workflows/test_replay.py``). ``--sandbox``
    (or ``ORCH_WORKFLOW_SANDBOX=1``) brings it back, to chase a suspected nondeterminism.
    """
    return SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()


async def run_worker(settings: TemporalSettings, task_queue: str = TASK_QUEUE,
                     sandboxed: bool = False) -> None:
    client = await connect_temporal(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with ThreadPoolExecutor(max_workers=MAX_ACTIVITY_THREADS) as executor:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=WORKFLOWS,
            activities=activities(client),
            activity_executor=executor,
            max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
            max_cached_workflows=MAX_CACHED_WORKFLOWS,
            workflow_task_poller_behavior=POLLERS,
            activity_task_poller_behavior=POLLERS,
            workflow_runner=workflow_runner(sandboxed),
            identity=worker_identity(),  # what the health check looks for
        )
        tune_garbage_collection()  # everything is imported and built by now
        async with worker:
            logging.info("orch worker polling %s on %s", task_queue, settings.address)
            takeover = asyncio.create_task(take_over_orphaned_watches(client))
            await stop.wait()
            takeover.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(prog="orch-worker")
    parser.add_argument("--address", help="Temporal frontend (default: $TEMPORAL_ADDRESS)")
    parser.add_argument("--namespace")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--sandbox", action="store_true",
                        default=os.environ.get(SANDBOX_ENV, "") not in ("", "0"),
                        help=f"run workflows in the SDK's sandbox (default: ${SANDBOX_ENV}, "
                             "else off)")
    parser.add_argument("--check", action="store_true",
                        help="exit 0 when a worker of this host polls the task queue, else 1")
    parser.add_argument("--max-age", type=float, default=MAX_AGE_S,
                        help="with --check: seconds since a poller's last poll (default "
                             f"{MAX_AGE_S:.0f})")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # asyncssh logs every connection and channel at INFO: the managed-job watch opens
    # thousands (orch.runtime.ssh_async).
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    # paramiko (the node steps' SSH) logs each connection, authentication and SFTP session
    # at INFO: four lines in the worker's log per managed job launched.
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    try:
        settings = load_settings().temporal_settings()
    except SpecError as err:  # a broken config file: its message, exit 2
        parser.error(str(err))
    updates = {k: v for k, v in (("address", args.address), ("namespace", args.namespace)) if v}
    settings = settings.model_copy(update=updates)
    if not settings.address:
        parser.error("no Temporal address: pass --address or set TEMPORAL_ADDRESS")
    if args.check:
        exit_without_finalizing(run_check(settings, args.task_queue, args.max_age))
    asyncio.run(run_worker(settings, args.task_queue, args.sandbox))
    exit_without_finalizing(0)


if __name__ == "__main__":
    main()
