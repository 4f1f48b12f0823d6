"""The steps of one launch: provision (through FailoverWorkflow), then runtime setup, then
the task's files and setup.

Provisioning only launches instances and starts Ray; file mounts and setup run after
(SkyPilot's provision-pipeline proposal), so a setup failure leaves a cluster that is up
and can be debugged. Each step is reported to the workflow that follows the launch, so
``orch launch`` can show progress and the cluster's record knows where its nodes are as
soon as they exist.

Two hosts run these steps (:class:`LaunchHost`): LaunchWorkflow, a child of the cluster's
workflow, which reports by signal (``workflows/launch.py``); and a managed job's own
workflow (``workflows/managed_job_launch.py``), which applies each report to its own state.
A launch child cost a managed job's launch a workflow of its own, the child's start and end
and a signal and two workflow tasks per report: about a third of the dev server's work per
launch (README, Performance).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import ClusterInfo
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
    from orch.records import LaunchInput, LaunchOutput, LaunchProgress, Placement
    from orch.summaries import failover_summary, on_nodes, task_details
    from workflows import storage_steps
    from workflows.failover import REVISION as FAILOVER_REVISION
    from workflows.failover import FailoverInput, FailoverOutput, FailoverWorkflow
    from workflows.options import LONG_CALL
    from workflows.shielding import shielded

CANCEL_BY_ID_PATCH = "launch-cancel-failover-by-id"  # workflow.patched id
# workflow.patched id: display-only steps are notes (workflows/progress.py), and the
# first "provisioning" is not reported (the failover's first report follows at once).
NOTES_PATCH = "launch-display-steps-as-notes"


class LaunchHost(Protocol):
    """What the steps need from the workflow that runs them."""

    report_to: str | None  # who follows the launch: the failover and uploads report to it
    failover_id: str

    def patched(self, patch_id: str) -> bool:
        """``workflow.patched`` for a host with histories from before the patch; True for
        a host that never ran the older steps."""
        ...

    def show(self, details: str) -> None:
        """The launch's step, in the host's current details (the Web UI), or nowhere."""
        ...

    async def report(self, progress: LaunchProgress) -> None:
        """Tell the workflow that follows the launch of a step, at once."""
        ...

    async def note(self, progress: LaunchProgress) -> None:
        """A step that changes nothing but the display: sent with the next report."""
        ...


async def launch(host: LaunchHost, request: LaunchInput) -> LaunchOutput:
    """Provision (unless the request reuses nodes), set up, sync and run setup."""
    task = request.task
    if request.reuse is not None:
        assert request.placement is not None and request.gcs_address is not None
        info, placement, gcs_address = request.reuse, request.placement, request.gcs_address
    else:
        info, placement = await _provision(host, request)
    buckets = await _prepare_storage(host, request, placement)
    if request.reuse is None:
        info, gcs_address = await _start_runtime(host, info)
    if task.workdir or task.file_mounts:
        await host.report(LaunchProgress(step="syncing files"))
        await workflow.execute_activity(
            SYNC_FILES,
            SyncRequest(info=info, workdir=task.workdir, file_mounts=task.file_mounts,
                        staged=task.staged),
            **LONG_CALL, summary=on_nodes("sync workdir and file mounts", info),
        )
    if buckets:
        await host.report(LaunchProgress(step=f"attaching {len(buckets)} bucket(s)"))
        await storage_steps.mount(info, buckets, host.report_to)
    if task.setup:
        await host.report(LaunchProgress(step="running setup"))
        await workflow.execute_activity(
            RUN_SETUP,
            SetupRequest(info=info, cluster_name=request.cluster_name, setup=task.setup,
                         envs=task.envs, secrets=task.secrets, job_id=request.job_id,
                         job_name=task.name),
            **LONG_CALL, summary=on_nodes("run the task's setup", info),
        )
    host.show(f"**Done:** {on_nodes('ready', info)}")
    return LaunchOutput(info=info, placement=placement, gcs_address=gcs_address)


async def _provision(host: LaunchHost, request: LaunchInput) -> tuple[ClusterInfo, Placement]:
    """Nodes from the failover, reported, then reachable over SSH."""
    task = request.task
    if host.patched(NOTES_PATCH):
        host.show("**Now:** provisioning")
    else:
        await host.report(LaunchProgress(step="provisioning"))
    failover = await workflow.start_child_workflow(
        FailoverWorkflow.run,
        FailoverInput(cluster_name=request.cluster_name,
                      name_on_cloud=request.name_on_cloud, task=task,
                      placement=request.placement, blocklist=request.blocklist,
                      retry_until_up=request.retry_until_up, was_up=request.was_up,
                      report_to=host.report_to, revision=FAILOVER_REVISION),
        id=host.failover_id,
        # A launch that ends (terminated, timed out) asks its failover to stop: a
        # cancelled FailoverWorkflow removes the nodes of the attempt in flight.
        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        static_summary=failover_summary(request.cluster_name, task, request.placement),
        static_details=task_details(task, request.requested_by),
    )
    provisioned = await _await_failover(host, failover)
    info, placement = provisioned.info, provisioned.placement
    await host.report(LaunchProgress(step="waiting for nodes", placement=placement, info=info))
    await workflow.execute_activity(WAIT_FOR_NODES, NodesRequest(info=info),
                                    **LONG_CALL, summary=on_nodes("wait for SSH", info))
    return info, placement


async def _start_runtime(host: LaunchHost, info: ClusterInfo) -> tuple[ClusterInfo, str]:
    """The runtime installed on every node and Ray started: the nodes (with their Python)
    and the GCS address."""
    nodes = NodesRequest(info=info)
    await host.note(LaunchProgress(step="setting up runtime"))
    pythons = await workflow.execute_activity(
        SETUP_RUNTIME, nodes, result_type=list[str], **LONG_CALL,
        summary=on_nodes("install the runtime (Python venv, Ray)", info))
    info = info.model_copy(update={"nodes": [
        node.model_copy(update={"python": python})
        for node, python in zip(info.nodes, pythons, strict=True)
    ]})
    await host.report(LaunchProgress(step="starting Ray", info=info))
    gcs_address = await workflow.execute_activity(
        START_RAY, StartRayRequest(info=info), result_type=str, **LONG_CALL,
        summary=on_nodes("ray start", info),
    )
    await host.note(LaunchProgress(step="runtime ready", gcs_address=gcs_address))
    return info, gcs_address


async def _await_failover(
    host: LaunchHost, failover: workflow.ChildWorkflowHandle[Any, FailoverOutput]
) -> FailoverOutput:
    """The failover's result. A cancelled launch cancels the failover by its id: the SDK's
    own child cancel names the run it started, which a failover that continued as new
    (--retry-until-up) no longer is, so the cancel would never reach it
    (temporalio/features#503) and the launch would wait forever."""
    try:
        return await asyncio.shield(failover)
    except asyncio.CancelledError:
        await shielded(_stop_failover(host, failover))
        raise


async def _stop_failover(
    host: LaunchHost, failover: workflow.ChildWorkflowHandle[Any, FailoverOutput]
) -> None:
    """Cancel the failover's current run and wait for its end; nodes it made anyway (it
    finished first) are reported, so that the cluster's teardown finds them."""
    if host.patched(CANCEL_BY_ID_PATCH):
        with contextlib.suppress(FailureError):  # it already ended
            await workflow.get_external_workflow_handle(failover.id).cancel()
    else:
        failover.cancel()
    try:
        provisioned = await failover
    except ChildWorkflowError:
        return  # cancelled (its nodes removed), or failed
    await host.report(LaunchProgress(step="cancelled after provisioning",
                                     placement=provisioned.placement, info=provisioned.info))


async def _prepare_storage(host: LaunchHost, request: LaunchInput, placement: Placement
                           ) -> list[BucketMount]:
    """The task's buckets, once the nodes' place is known and before runtime setup:
    reported first (the teardown of whoever follows the launch then releases them
    whatever happens), then attached (made, if new) and uploaded into. None: nothing is
    done."""
    buckets = storage_steps.resolved(request, placement)
    if not buckets:
        return []
    await host.report(LaunchProgress(step=f"preparing {len(buckets)} bucket(s)",
                                     storage=buckets))
    return await storage_steps.prepare(request, buckets, host.report_to)
