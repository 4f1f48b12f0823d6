"""A cluster's own job's output through the staging store: the CLI's reader
(orch.client.cluster_output) starts the job's copier (JobOutputWorkflow, the real watch
on a worker) and follows the store until the job ended; a later read shares the copy
the first one made. The head is a local-cloud node whose job table is written by hand
(tests/workflows/test_managed_job.py's HeadJob); the store is the local one under a
throwaway ORCH_HOME."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.managed_job import watch_job
from orch.client.cluster_output import print_cluster_job_output
from orch.clouds.base import ProvisionConfig
from orch.clouds.local import REGION, LocalProvider
from orch.job_output import cluster_job_key, job_output_workflow_id
from orch.records import ClusterRecord, Placement
from orch.runtime.job_records import JobRecord
from orch.status import ClusterStatus, JobStatus
from tests.workflows.histories import save_with_children
from tests.workflows.test_managed_job import HeadJob, local_cloud
from workflows.job_output import JobOutputWorkflow

__all__ = ["local_cloud"]  # the fixture, shared with test_managed_job.py


async def test_the_output_of_a_cluster_job_is_followed_through_the_store_and_copied_once(
    time_skipping_env: WorkflowEnvironment, local_cloud: LocalProvider,
) -> None:
    env = time_skipping_env
    local_cloud.run_instances(ProvisionConfig(cluster_name="watched", num_nodes=1,
                                              region=REGION))
    info = local_cloud.get_cluster_info(REGION, "watched")
    record = ClusterRecord(name="watched", name_on_cloud="watched", status=ClusterStatus.UP,
                           placement=Placement(cloud="local", region=REGION), info=info)
    assert info.head is not None
    job = HeadJob(info.head)
    job.set(JobStatus.RUNNING, "line 1\n")
    submitted = JobRecord(id=1, status=JobStatus.RUNNING, submitted_at=job.submitted)
    queue = f"output-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []

    async with Worker(env.client, task_queue=queue, workflows=[JobOutputWorkflow],
                      activities=[watch_job]):
        following = asyncio.ensure_future(print_cluster_job_output(
            env.client, queue, record, submitted, True, lines.append))
        while lines != ["line 1"]:
            assert not following.done()
            await asyncio.sleep(0.05)
        job.set(JobStatus.SUCCEEDED, "line 2\n")
        await asyncio.wait_for(following, 60)
        assert lines == ["line 1", "line 2"]

        again: list[str] = []  # the copier ended: the store has it all, nothing is copied again
        await print_cluster_job_output(env.client, queue, record, submitted, False,
                                       again.append)
        assert again == lines
        copier = env.client.get_workflow_handle(
            job_output_workflow_id("watched", cluster_job_key("watched", submitted)))
        finished = await copier.describe()
        assert finished.status == WorkflowExecutionStatus.COMPLETED
        await save_with_children(env.client, copier, "job_output")
