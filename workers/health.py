"""``python -m workers --check``: is an orch worker of this host polling its task queue?

The container health check of ``orch-worker``. A live process is not enough (a worker that
lost the server, or whose pollers stopped, still runs), and "the task queue has pollers" is
not either (with many replicas, the others' pollers would hide this one's). So the check
asks the server which workers polled the queue lately and looks for one of this host: a
poller whose identity is ``<pid>@<hostname>`` (:func:`worker_identity`) with that pid alive
here, seen within ``max_age_s`` on both the workflow and the activity queue. The server
keeps a stopped worker's pollers listed for minutes, hence the pid.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from orch.client import connect_temporal
from orch.config import TemporalSettings
from orch.runtime.procfs import alive

# An idle poller's last access is refreshed once per long poll (about a minute).
MAX_AGE_S = 150.0
CONNECT_TIMEOUT_S = 10.0
QUEUE_TYPES = {"workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
               "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY}


def worker_identity() -> str:
    """The identity the worker polls with (the SDK's default form, set explicitly)."""
    return f"{os.getpid()}@{socket.gethostname()}"


def local_worker(identity: str) -> bool:
    """Whether ``identity`` names a live process of this host."""
    pid, _, host = identity.partition("@")
    return host == socket.gethostname() and pid.isdigit() and alive(int(pid))


async def check(settings: TemporalSettings, task_queue: str,
                max_age_s: float = MAX_AGE_S) -> tuple[bool, str]:
    """(healthy, what was found), from one describe per queue type."""
    client = await connect_temporal(settings, timeout_s=CONNECT_TIMEOUT_S)
    found = []
    for kind, queue_type in QUEUE_TYPES.items():
        described = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=settings.namespace, task_queue=TaskQueue(name=task_queue),
            task_queue_type=queue_type))
        ages = {p.identity: time.time() - p.last_access_time.ToSeconds()
                for p in described.pollers if local_worker(p.identity)}
        fresh = {identity: age for identity, age in ages.items() if age <= max_age_s}
        if not fresh:
            seen = ", ".join(sorted(p.identity for p in described.pollers)) or "none"
            return False, (f"no {kind} poller of this host ({socket.gethostname()}) on task "
                           f"queue {task_queue} within {max_age_s:.0f} s; pollers seen: {seen}")
        found.append(f"{kind}: {', '.join(sorted(fresh))}")
    return True, f"polling {task_queue} on {settings.address} ({'; '.join(found)})"


def run_check(settings: TemporalSettings, task_queue: str, max_age_s: float = MAX_AGE_S) -> int:
    """Print the verdict; 0 healthy, 1 not (including a server that cannot be reached)."""
    try:
        healthy, message = asyncio.run(asyncio.wait_for(
            check(settings, task_queue, max_age_s), timeout=CONNECT_TIMEOUT_S + 10))
    except Exception as err:  # any failure to ask is an unhealthy answer, not a traceback
        healthy, message = False, f"cannot ask {settings.address}: {type(err).__name__}: {err}"
    print(f"{'healthy' if healthy else 'unhealthy'}: {message}", flush=True)
    return 0 if healthy else 1
