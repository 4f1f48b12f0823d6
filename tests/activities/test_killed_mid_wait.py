"""A worker SIGKILLed while it waits on a slow cloud, on each cloud (issue 12, parts 1 and 3).

Each story runs in ``python -m workers`` processes (``short_heartbeat_worker``: provider
calls and waits under a :data:`HEARTBEAT` timeout) against a dev server of its own: a
launch (FailoverWorkflow) whose worker is killed while it waits for RUNNING after the
create, then a down (TeardownWorkflow) whose worker is killed while it waits for the long
delete (on Azure, the resource group's). A second worker is polling all along and picks
the wait up again, and the test checks that

* the server noticed the dead worker by the heartbeat timeout: the wait's retry has a
  heartbeat timeout as its last failure, in the history;
* the retried wait resumed from its heartbeat details: the same ``since`` (so the same
  deadline), and its poll count going on from where the killed attempt left it;
* the cloud holds no duplicate (as many instances as nodes, one of everything else) and,
  after the down, nothing of the cluster at all.

Profile: every create and long delete takes :data:`LATENCY`, longer than the heartbeat
timeout plus the retry's 2 s backoff plus a few polls: the kill lands mid-wait, and the
resumed attempt still has waiting to do.

============  =====================================  =================================
cloud         slow here (seconds)                     waits killed
============  =====================================  =================================
AWS           pending 15, shutting-down 15            describe until running, until
                                                      terminated
GCP           insert 15, delete 15                    the insert, the delete operations
Azure         VM create 15, resource-group delete 15  the VMs' create, the group's delete
============  =====================================  =================================
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orch.contracts.provision import WAIT_INSTANCES_GONE, WAIT_RUNNING
from orch.records import TeardownInput
from orch.spec import Task
from orch.waiting import WaitProgress
from tests.activities import profiles
from tests.activities.conftest import (
    Moto,
    activity_runs,
    runs_of,
    stop_launch_semaphore,
    worker_process,
)
from tests.activities.profiles import Cloud
from tests.fakes.ec2_fault_front import EC2FaultFront
from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow
from workflows.teardown import TeardownWorkflow

HEARTBEAT = timedelta(seconds=5)
LATENCY = 15.0
NODES = 2


@dataclass
class Story:
    """A cloud under the profile, and what a launched cluster holds there (kind: count)."""

    cloud: Cloud
    launched: dict[str, int]


@pytest.fixture
def aws_story(aws_env: EC2FaultFront, moto: Moto) -> Story:
    cloud = profiles.aws(aws_env, moto, {"pending": LATENCY, "shutting-down": LATENCY})
    return Story(cloud, {"instances": NODES, "volumes": NODES, "security groups": 1,
                         "key pairs": 1})


@pytest.fixture
def gcp_story(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Story]:
    with profiles.gcp(monkeypatch, tmp_path, {"insert": LATENCY, "delete": LATENCY}) as cloud:
        yield Story(cloud, {"instances": NODES})


@pytest.fixture
def azure_story(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Story]:
    with profiles.azure(monkeypatch, tmp_path, {"VirtualMachines_CreateOrUpdate": LATENCY,
                                                "ResourceGroups_Delete": LATENCY}) as cloud:
        yield Story(cloud, {"resourceGroups": 1, "virtualMachines": NODES,
                            "networkInterfaces": NODES, "publicIPAddresses": NODES,
                            "networkSecurityGroups": 1, "virtualNetworks": 1})


@pytest.fixture(params=["aws", "gcp", "azure"])
def story(request: pytest.FixtureRequest) -> Story:
    return request.getfixturevalue(f"{request.param}_story")


@dataclass
class Wait:
    """A wait activity as the server sees it: its attempt, its latest heartbeat details,
    and the worker running it (``pid@host``)."""

    attempt: int
    progress: WaitProgress | None
    worker: str


class Workers:
    """``python -m workers`` processes on one queue. One more than the story needs is
    always running, so that a worker's start (seconds of imports on a loaded machine) is
    never what a resumed wait waits for."""

    def __init__(self, env: WorkflowEnvironment, tmp_path: Path) -> None:
        self.env, self.tmp_path = env, tmp_path
        self.queue = f"killed-{uuid.uuid4().hex[:8]}"
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        log = self.tmp_path / f"worker-{len(self.started) + 1}.log"
        self.started.append(worker_process(self.env, self.queue, log, HEARTBEAT))
        return self.started[-1]

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}"
                         for log in sorted(self.tmp_path.glob("worker-*.log")))

    async def run(self, workflow: Any, request: Any) -> WorkflowHandle[Any, Any]:
        return await self.env.client.start_workflow(
            workflow, request, task_queue=self.queue, id=f"killed/{uuid.uuid4().hex[:12]}")

    async def wait_of(self, handle: WorkflowHandle[Any, Any], name: str) -> Wait | None:
        """The activity ``name`` while it is pending, None when it is not."""
        pending = [p for p in (await handle.describe()).raw_description.pending_activities
                   if p.activity_type.name == name]
        if not pending:
            return None
        return Wait(pending[0].attempt, await self.progress(pending[0].heartbeat_details),
                    pending[0].last_worker_identity)

    async def progress(self, details: Payloads) -> WaitProgress | None:
        """Heartbeat details, as the waiter wrote them."""
        if not details.payloads:
            return None
        (value,) = await self.env.client.data_converter.decode(details.payloads)
        return WaitProgress.model_validate(value) if isinstance(value, dict) else None

    async def kill_mid_wait(self, handle: WorkflowHandle[Any, Any], name: str) -> WaitProgress:
        """Once the wait has polled, SIGKILL the worker running it, and start a spare."""
        wait = await self._until(handle, name, lambda w: w.progress is not None
                                 and w.progress.polls >= 1, "the wait to poll")
        (worker,) = [w for w in self.started if wait.worker.startswith(f"{w.pid}@")]
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        self.start()
        assert wait.progress is not None
        return wait.progress

    async def resumed(self, handle: WorkflowHandle[Any, Any], name: str,
                      killed: WaitProgress) -> WaitProgress:
        """Until a retried attempt reports a poll past the last one ``killed`` reported."""
        wait = await self._until(handle, name, lambda w: w.attempt >= 2 and (
            w.progress is not None and w.progress.polls > killed.polls),
            "a retried attempt to poll")
        assert wait.progress is not None
        return wait.progress

    async def _until(self, handle: WorkflowHandle[Any, Any], name: str, test: Any,
                     what: str) -> Wait:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            wait = await self.wait_of(handle, name)
            if wait is not None and test(wait):
                return wait
            status = (await handle.describe()).status
            assert status == WorkflowExecutionStatus.RUNNING, (
                f"{name} ended before {what} was seen\n{self.logs()}")
            await asyncio.sleep(0.2)
        raise AssertionError(f"no {what} in {name} within 120 s\n{self.logs()}")

    def stop(self) -> None:
        for worker in self.started:
            if worker.poll() is None:
                worker.terminate()
                worker.wait(timeout=30)


async def killed_and_resumed(workers: Workers, handle: WorkflowHandle[Any, Any],
                             name: str) -> Any:
    """Kill the worker mid-wait, see the next one resume the wait, and the workflow end."""
    before_kill = await workers.kill_mid_wait(handle, name)
    resumed = await workers.resumed(handle, name, before_kill)
    result = await handle.result()
    last = runs_of(await activity_runs(handle), name)[-1]
    assert last.attempt == 2, workers.logs()
    timeout = last.last_failure.timeout_failure_info
    assert timeout.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    # What the killed attempt reported last (the server's record), and the retry after it:
    # the same wait, the same start (so the same deadline), polls counted on.
    killed = await workers.progress(timeout.last_heartbeat_details) or before_kill
    assert resumed.what == killed.what == before_kill.what
    assert resumed.since == killed.since == before_kill.since
    assert resumed.polls > killed.polls >= before_kill.polls
    return result


async def test_a_worker_killed_mid_wait_resumes_it_without_duplicates(
    dev_server: WorkflowEnvironment, story: Story, cluster_name: str, orch_home: Path,
    tmp_path: Path,
) -> None:
    workers = Workers(dev_server, tmp_path)
    task = Task(name="killed", num_nodes=NODES, resources=story.cloud.resources)
    workers.start()
    workers.start()
    try:
        launch = await workers.run(FailoverWorkflow.run,
                                   FailoverInput(cluster_name=cluster_name, task=task))
        launched: FailoverOutput = await killed_and_resumed(workers, launch, WAIT_RUNNING)
        assert launched.history == [] and len(launched.info.nodes) == NODES
        held = story.cloud.left(cluster_name)
        assert {kind: len(names) for kind, names in held.items()} == story.launched, held

        down = await workers.run(TeardownWorkflow.run, TeardownInput(
            cluster_name=cluster_name, placement=launched.placement))
        await killed_and_resumed(workers, down, WAIT_INSTANCES_GONE)
        assert story.cloud.left(cluster_name) == {}
    finally:
        workers.stop()
        await stop_launch_semaphore(dev_server.client)
