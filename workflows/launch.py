"""LaunchWorkflow: provision (through FailoverWorkflow), then runtime setup, then the task's
files and setup.

Provisioning only launches instances and starts Ray; file mounts and setup run after
(SkyPilot's provision-pipeline proposal), so a setup failure leaves a cluster that is up
and can be debugged. Each step is reported to the parent ClusterWorkflow by a signal, so
``orch launch`` can show progress and the cluster's record knows where its nodes are as
soon as they exist.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.contracts.runtime import (
        RUN_SETUP,
        SETUP_RUNTIME,
        START_RAY,
        SYNC_FILES,
        WAIT_FOR_NODES,
        NodesRequest,
        SetupRequest,
        StartRayRequest,
        SyncRequest,
    )
    from orch.contracts.storage import BucketMount
    from orch.records import (
        LAUNCH_WORKFLOW,
        LaunchInput,
        LaunchOutput,
        LaunchProgress,
        Placement,
    )
    from orch.summaries import failover_summary, on_nodes, task_details
    from workflows import storage_steps
    from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow
    from workflows.options import LONG_CALL
    from workflows.progress import ProgressReports
    from workflows.shielding import shielded

CANCEL_BY_ID_PATCH = "launch-cancel-failover-by-id"  # workflow.patched id
OVERLAPPED_REPORTS_PATCH = "launch-reports-overlap-steps"  # workflow.patched id
# workflow.patched id: display-only steps are notes (workflows/progress.py), and the
# first "provisioning" is not reported (the failover's first report follows at once).
NOTES_PATCH = "launch-display-steps-as-notes"


@workflow.defn(name=LAUNCH_WORKFLOW)
class LaunchWorkflow:
    def __init__(self) -> None:
        self.reports = ProgressReports(OVERLAPPED_REPORTS_PATCH)

    async def _report(self, progress: LaunchProgress) -> None:
        """Tell the parent (the cluster's or the managed job's workflow) of a step."""
        workflow.set_current_details(f"**Now:** {progress.step}")
        await self.reports.send(self._parent_id(), progress)

    async def _note(self, progress: LaunchProgress) -> None:
        """A step that changes nothing but the display: a note for the parent's record,
        sent with the next report (before NOTES_PATCH, a report of its own)."""
        if workflow.patched(NOTES_PATCH):
            workflow.set_current_details(f"**Now:** {progress.step}")
            self.reports.note(progress)
        else:
            await self._report(progress)

    async def _await_failover(
        self, failover: workflow.ChildWorkflowHandle[Any, FailoverOutput]
    ) -> FailoverOutput:
        """The failover's result. A cancelled launch cancels the failover by its id: the
        SDK's own child cancel names the run it started, which a failover that continued
        as new (--retry-until-up) no longer is, so the cancel would never reach it
        (temporalio/features#503) and the launch would wait forever."""
        try:
            return await asyncio.shield(failover)
        except asyncio.CancelledError:
            await shielded(self._stop_failover(failover))
            raise

    async def _stop_failover(
        self, failover: workflow.ChildWorkflowHandle[Any, FailoverOutput]
    ) -> None:
        """Cancel the failover's current run and wait for its end; nodes it made anyway
        (it finished first) are reported, so that the cluster's teardown finds them."""
        if workflow.patched(CANCEL_BY_ID_PATCH):
            with contextlib.suppress(FailureError):  # it already ended
                await workflow.get_external_workflow_handle(failover.id).cancel()
        else:
            failover.cancel()
        try:
            provisioned = await failover
        except ChildWorkflowError:
            return  # cancelled (its nodes removed), or failed
        await self._report(LaunchProgress(step="cancelled after provisioning",
                                          placement=provisioned.placement,
                                          info=provisioned.info))

    def _parent_id(self) -> str | None:
        parent = workflow.info().parent
        return parent.workflow_id if parent is not None else None

    async def _prepare_storage(self, request: LaunchInput, placement: Placement
                               ) -> list[BucketMount]:
        """The task's buckets, once the nodes' place is known and before runtime setup:
        reported to the parent first (its teardown then releases them whatever happens),
        then attached (made, if new) and uploaded into. None: nothing is done."""
        buckets = storage_steps.resolved(request, placement)
        if not buckets:
            return []
        await self._report(LaunchProgress(step=f"preparing {len(buckets)} bucket(s)",
                                          storage=buckets))
        return await storage_steps.prepare(request, buckets, self._parent_id())

    @workflow.run
    async def run(self, request: LaunchInput) -> LaunchOutput:
        try:
            return await self._launch(request)
        finally:  # however it ends, the parent has every report before the end
            await shielded(self.reports.drained())

    async def _launch(self, request: LaunchInput) -> LaunchOutput:
        task = request.task
        if request.reuse is not None:
            assert request.placement is not None and request.gcs_address is not None
            info, placement, gcs_address = request.reuse, request.placement, request.gcs_address
        else:
            if workflow.patched(NOTES_PATCH):
                workflow.set_current_details("**Now:** provisioning")
            else:
                await self._report(LaunchProgress(step="provisioning"))
            parent = workflow.info().parent
            failover = await workflow.start_child_workflow(
                FailoverWorkflow.run,
                FailoverInput(cluster_name=request.cluster_name,
                              name_on_cloud=request.name_on_cloud, task=task,
                              placement=request.placement, blocklist=request.blocklist,
                              retry_until_up=request.retry_until_up, was_up=request.was_up,
                              report_to=parent.workflow_id if parent else None),
                id=f"{workflow.info().workflow_id}/failover",
                # A launch that ends (terminated, timed out) asks its failover to stop: a
                # cancelled FailoverWorkflow removes the nodes of the attempt in flight.
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=failover_summary(request.cluster_name, task, request.placement),
                static_details=task_details(task, request.requested_by),
            )
            provisioned = await self._await_failover(failover)
            info, placement = provisioned.info, provisioned.placement
            await self._report(LaunchProgress(
                step="waiting for nodes", placement=placement, info=info
            ))
            await workflow.execute_activity(WAIT_FOR_NODES, NodesRequest(info=info),
                                            **LONG_CALL, summary=on_nodes("wait for SSH", info))
        buckets = await self._prepare_storage(request, placement)
        if request.reuse is None:
            nodes = NodesRequest(info=info)
            await self._note(LaunchProgress(step="setting up runtime"))
            pythons = await workflow.execute_activity(
                SETUP_RUNTIME, nodes, result_type=list[str], **LONG_CALL,
                summary=on_nodes("install the runtime (Python venv, Ray)", info))
            info = info.model_copy(update={"nodes": [
                node.model_copy(update={"python": python})
                for node, python in zip(info.nodes, pythons, strict=True)
            ]})
            await self._report(LaunchProgress(step="starting Ray", info=info))
            gcs_address = await workflow.execute_activity(
                START_RAY, StartRayRequest(info=info), result_type=str, **LONG_CALL,
                summary=on_nodes("ray start", info),
            )
            await self._note(LaunchProgress(step="runtime ready", gcs_address=gcs_address))
        if task.workdir or task.file_mounts:
            await self._report(LaunchProgress(step="syncing files"))
            await workflow.execute_activity(
                SYNC_FILES,
                SyncRequest(info=info, workdir=task.workdir, file_mounts=task.file_mounts,
                            staged=task.staged),
                **LONG_CALL, summary=on_nodes("sync workdir and file mounts", info),
            )
        if buckets:
            await self._report(LaunchProgress(step=f"attaching {len(buckets)} bucket(s)"))
            await storage_steps.mount(info, buckets, self._parent_id())
        if task.setup:
            await self._report(LaunchProgress(step="running setup"))
            await workflow.execute_activity(
                RUN_SETUP,
                SetupRequest(info=info, cluster_name=request.cluster_name, setup=task.setup,
                             envs=task.envs, secrets=task.secrets, job_id=request.job_id,
                             job_name=task.name),
                **LONG_CALL, summary=on_nodes("run the task's setup", info),
            )
        workflow.set_current_details(f"**Done:** {on_nodes('ready', info)}")
        return LaunchOutput(info=info, placement=placement, gcs_address=gcs_address)
