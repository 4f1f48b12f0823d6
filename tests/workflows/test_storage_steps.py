"""The storage steps of a cluster's and a managed job's life, on the time-skipping server:
the scripted clouds of test_managed_job.py, the real bucket entity and store activities on
the local store (a throwaway ORCH_HOME), and mount/unmount recorded instead of run (the
nodes are fakes; tests/e2e/test_storage.py mounts for real).

A cluster attaches its buckets at launch, unmounts them at stop, mounts them again at
start, and releases them at down, which deletes the non-persistent one; a managed job's
bucket outlives its preempted cluster, and goes when the job ends."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.storage import PLAIN_STORAGE_ACTIVITIES, StorageActivities
from orch.contracts.storage import (
    MOUNT_BUCKETS,
    UNMOUNT_BUCKETS,
    MountRequest,
    UnmountRequest,
)
from orch.managed_jobs import ManagedJobStatus
from orch.records import (
    ClusterInput,
    ClusterRecord,
    DownRequest,
    LaunchRequest,
    StartRequest,
    StopRequest,
)
from orch.semaphore import LAUNCH_SEMAPHORE_ID, SemaphoreSettings
from orch.spec import Task
from orch.spec_storage import StorageMount
from orch.storage.base import StoreKind
from tests.workflows.histories import save_with_children
from tests.workflows.test_managed_job import Harness, JobCloud, running
from workers.registry import WORKFLOWS, client_activities
from workflows.cluster import ClusterWorkflow


class Nodes:
    """What mount_buckets and unmount_buckets were asked, per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def activities(self) -> list:
        @activity.defn(name=MOUNT_BUCKETS)
        async def mount_buckets(request: MountRequest) -> None:
            self.calls.append(("mount", [m.path for m in request.mounts]))

        @activity.defn(name=UNMOUNT_BUCKETS)
        async def unmount_buckets(request: UnmountRequest) -> list[str]:
            self.calls.append(("unmount", [m.path for m in request.mounts]))
            return []

        return [mount_buckets, unmount_buckets]


@pytest.fixture
async def world(time_skipping_env: WorkflowEnvironment, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Harness, Nodes, Path]]:
    monkeypatch.setenv("ORCH_HOME", str(tmp_path))
    env, cloud, nodes = time_skipping_env, JobCloud(time_skipping_env), Nodes()
    queue = f"storage-{uuid.uuid4().hex[:8]}"
    storage = StorageActivities(env.client, publish_search_attributes=False)
    activities = (cloud.activities() + client_activities(env.client, SemaphoreSettings())
                  + nodes.activities()
                  + [a for a in PLAIN_STORAGE_ACTIVITIES if a.__name__ != UNMOUNT_BUCKETS]
                  + [storage.prepare_bucket, storage.upload_to_bucket, storage.release_bucket])
    # The sticky cache stays on: without it, an Update that lands while a run is evicted
    # waited out the 10 s workflow task timeout (one to three times a test, enough to
    # miss the harness's deadlines on a loaded machine); test_replay.py guards replays.
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(env.client, task_queue=queue, workflows=WORKFLOWS,
                          activities=activities, activity_executor=executor,
                          max_heartbeat_throttle_interval=timedelta(milliseconds=50),
                          default_heartbeat_throttle_interval=timedelta(milliseconds=50)):
            yield Harness(env, cloud, queue), nodes, tmp_path / "storage"
            with suppress(RPCError):  # never started: nothing to stop
                handle = env.client.get_workflow_handle(LAUNCH_SEMAPHORE_ID)
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("test over")


def bucket() -> str:
    return f"b-{uuid.uuid4().hex[:10]}"


async def test_a_clusters_buckets_follow_launch_stop_start_and_down(
    world: tuple[Harness, Nodes, Path], tmp_path: Path,
) -> None:
    harness, nodes, root = world
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x")
    ckpt, data = bucket(), bucket()
    task = Task(run="train", storage_mounts={
        "~/ckpt": StorageMount(name=ckpt, persistent=False, store=StoreKind.LOCAL),
        "~/data": StorageMount(name=data, store=StoreKind.LOCAL,
                                                   source=str(tmp_path / "data"))})
    name = f"st-{uuid.uuid4().hex[:6]}"
    handle: WorkflowHandle[ClusterWorkflow, ClusterRecord] = await harness.client.start_workflow(
        ClusterWorkflow.run, ClusterInput(name=name, publish_search_attributes=False),
        id=f"cluster/{name}", task_queue=harness.task_queue)

    launched = await handle.execute_update(ClusterWorkflow.launch, LaunchRequest(task=task))
    assert [m.path for m in launched.record.storage] == ["~/ckpt", "~/data"]
    assert (root / ckpt).is_dir() and (root / data / "x.txt").read_text() == "x"
    await handle.execute_update(ClusterWorkflow.stop, StopRequest())
    await handle.execute_update(ClusterWorkflow.start, StartRequest())
    assert nodes.calls == [("mount", ["~/ckpt", "~/data"]), ("unmount", ["~/ckpt", "~/data"]),
                           ("mount", ["~/ckpt", "~/data"])]

    down = await handle.execute_update(ClusterWorkflow.down, DownRequest())
    assert f"Bucket {ckpt} deleted (local://{ckpt})." in down.message
    assert not (root / ckpt).exists() and (root / data / "x.txt").exists()  # persistent
    assert nodes.calls[-1] == ("unmount", ["~/ckpt", "~/data"])
    await save_with_children(harness.client, handle, "cluster_storage")


async def test_a_jobs_bucket_outlives_its_preempted_cluster_and_goes_with_the_job(
    world: tuple[Harness, Nodes, Path],
) -> None:
    harness, nodes, root = world
    ckpt = bucket()
    task = Task(name="train", run="python train.py", storage_mounts={
        "~/ckpt": StorageMount(name=ckpt, persistent=False, store=StoreKind.LOCAL)})
    job_id, handle = await harness.start(task)
    cluster = f"job-{job_id}-0"
    await harness.until(handle, "RUNNING", running)
    assert (root / ckpt).is_dir()

    state = await harness.preempt_until_running_again(handle, cluster)
    assert (root / ckpt).is_dir()  # the job still uses it: its checkpoints stay
    assert [b.name for b in state.buckets] == [ckpt]
    harness.cloud.finish(cluster)
    final = await harness.result(handle)

    assert final.status == ManagedJobStatus.SUCCEEDED and final.recoveries == 1
    assert not (root / ckpt).exists() and final.buckets == []
    assert any(e.message == f"bucket {ckpt} deleted (local://{ckpt})" for e in final.events)
    assert [c for c, _ in nodes.calls] == ["mount", "unmount", "mount", "unmount"]
    await save_with_children(harness.client, handle, "managed_job_storage")
