"""What every part of ClusterWorkflow shares: the record and how it is shown (events,
the Web UI's details, search attributes), the operations' lock, the guards of the
Updates, and the teardown child that stop, down and autostop run. The upkeep (timers,
autostop, refresh: ``workflows/cluster_upkeep.py``) builds on it, and the workflow
(``workflows/cluster.py``) on both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.fit import TASK_DOES_NOT_FIT, misfit
    from orch.records import (
        SA_AUTOSTOP,
        SA_CLOUD,
        SA_CLUSTER,
        SA_CLUSTER_STATUS,
        SA_NUM_NODES,
        SA_REGION,
        SA_RESOURCES,
        ClusterRecord,
        TeardownInput,
        TeardownResult,
        cluster_workflow_id,
    )
    from orch.spec import Task
    from orch.status import ClusterStatus
    from orch.summaries import cluster_details, teardown_summary
    from workflows import storage_steps
    from workflows.options import error_message
    from workflows.teardown import TeardownWorkflow


REFRESH_EVERY = timedelta(minutes=10)
AUTOSTOP_RECHECK = timedelta(seconds=30)  # while jobs run, how often to look again
MIN_TIMER = timedelta(seconds=1)
MAX_EVENTS = 100
CANCEL_TEARDOWN_PATCH = "cluster-cancel-teardown"  # workflow.patched id: cancel tears down
DOWN_CUTS_SHORT_PATCH = "cluster-down-cuts-launch-short"  # patched id: down cancels a launch
RELAUNCH_IN_SHAPE_PATCH = "cluster-relaunch-in-shape"  # an INIT cluster keeps its shape
CANCEL_DOWN = "down (workflow cancelled)"  # the operation a cancellation runs
CANCELLABLE = ("launch", "start", "exec")  # operations a cancellation cuts short


def resources_summary(record: ClusterRecord) -> str:
    if record.placement is None or record.info is None or not record.info.nodes:
        return ""
    node, placement = record.info.nodes[0], record.placement
    what = placement.instance_type or f"{node.cpus:g} CPU, {node.memory_gb:g} GB"
    spot = ", spot" if placement.use_spot else ""
    return f"{len(record.info.nodes)}x {placement.cloud}({what}{spot})"


def init_hint(name: str, has_nodes: bool) -> str:
    """What to do with a cluster a failed launch left INIT."""
    keeps = " (it keeps the cluster's nodes)" if has_nodes else ""
    return (f"Cluster {name} is left INIT. Retry with: orch launch -c {name} TASK{keeps}, "
            f"or tear it down: orch down {name}")


class ClusterBase:
    """The record, the lock, the guards and the teardown; the attributes are set by
    ClusterWorkflow.__init__."""

    state: ClusterRecord
    publish: bool
    lock: asyncio.Lock
    operations: int
    schedule_changed: bool
    queued: list[str]
    current: tuple[str, asyncio.Task[object] | None] | None
    cancelled: bool

    def _cut_short(self) -> None:
        """Cancel the operation under way if it builds (launch, start, exec): the failover
        it runs removes the nodes it was making, and the lock comes free for a teardown."""
        if self.current is not None and self.current[0] in CANCELLABLE and self.current[1]:
            self.current[1].cancel()

    def _event(self, step: str) -> None:
        """A step of an operation: shown by progress displays, kept (briefly) in the record."""
        self.state.step = step
        self.state.events = [*self.state.events[-(MAX_EVENTS - 1):], step]
        self.state.event_count += 1
        self._show()

    def _show(self) -> None:
        """The Web UI's current details: the record's status and step, and what waits."""
        details = cluster_details(self.state)
        if self.queued:
            details += f"\n\n**Waiting for the lock:** {', '.join(self.queued)}"
        workflow.set_current_details(details)

    @asynccontextmanager
    async def _turn(self, operation: str) -> AsyncIterator[None]:
        """Hold the lock for ``operation``; while another holds it, say so in the UI."""
        self.queued.append(operation)
        self._show()
        try:
            await self.lock.acquire()
        finally:
            self.queued.remove(operation)
        try:
            if self.cancelled and operation not in (CANCEL_DOWN, "down"):
                raise ApplicationError(
                    f"cluster {self.state.name} is being torn down (its workflow was "
                    "cancelled)", type="ClusterGone", non_retryable=True)
            self.current = (operation, asyncio.current_task())
            self._show()
            yield
        finally:
            self.current = None
            self.lock.release()
            self._show()

    def _touch(self) -> None:
        """Something happened on the cluster: the autostop clock starts again."""
        self.state.last_activity_at = workflow.now()
        self.schedule_changed = True
        self._publish()

    def _publish(self) -> None:
        if not self.publish:
            return  # the time-skipping test server has no custom search attributes
        placement = self.state.placement
        workflow.upsert_search_attributes([
            SearchAttributeKey.for_keyword(SA_CLUSTER).value_set(self.state.name),
            SearchAttributeKey.for_keyword(SA_CLUSTER_STATUS).value_set(self.state.status),
            SearchAttributeKey.for_keyword(SA_CLOUD).value_set(
                placement.cloud if placement else ""),
            SearchAttributeKey.for_keyword(SA_REGION).value_set(
                placement.region if placement else ""),
            SearchAttributeKey.for_int(SA_NUM_NODES).value_set(self.state.num_nodes),
            SearchAttributeKey.for_keyword(SA_RESOURCES).value_set(self.state.task_resources),
            SearchAttributeKey.for_keyword(SA_AUTOSTOP).value_set(
                self.state.autostop_summary()),
        ])

    def _set_status(self, status: ClusterStatus, step: str = "", reason: str = "") -> None:
        self.state.account_uptime(status, workflow.now())
        self.state.status = status
        self.state.step = step
        self.state.status_reason = reason
        self.state.task_resources = resources_summary(self.state)
        if status == ClusterStatus.UP:
            self.state.ever_up = True
        self.schedule_changed = True
        self._publish()
        self._show()

    def _child_id(self, kind: str) -> str:
        self.operations += 1
        info = workflow.info()
        return f"{info.workflow_id}/{kind}-{info.run_id[:8]}-{self.operations}"

    def _next_job_id(self) -> int:
        job_id = self.state.next_job_id
        self.state.next_job_id += 1
        return job_id

    async def _teardown(self, terminate: bool, purge: bool) -> TeardownResult:
        self.state.step = "tearing down" if terminate else "stopping"
        stopped = self.state.status == ClusterStatus.STOPPED
        teardown = TeardownInput(
            cluster_name=self.state.name, name_on_cloud=self.state.name_on_cloud,
            placement=self.state.placement,
            info=None if stopped else self.state.info, terminate=terminate,
            regions=self.state.regions if terminate else [],
            storage=self.state.storage, storage_user=cluster_workflow_id(self.state.name),
        )
        try:
            result: TeardownResult = await workflow.execute_child_workflow(
                TeardownWorkflow.run, teardown, id=self._child_id("down" if terminate else "stop"),
                # A teardown under way finishes whatever becomes of the cluster workflow:
                # stopping it halfway would leave instances running that no record names.
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=teardown_summary(self.state.name, teardown.placement,
                                                self.state.info, terminate),
            )
        except ChildWorkflowError as err:
            self.state.step = ""
            self.state.last_error = error_message(err)
            if not purge:
                raise ApplicationError(
                    f"{'teardown' if terminate else 'stop'} of {self.state.name} failed: "
                    f"{self.state.last_error}. Retry"
                    + (", or use --purge to forget the cluster anyway." if terminate else "."),
                    type="TeardownFailed", non_retryable=True,
                ) from err
            cloud = self.state.placement.cloud if self.state.placement else "?"
            result = TeardownResult(
                message=f"Cluster {self.state.name} forgotten (--purge).",
                warnings=[f"teardown failed: {self.state.last_error}; instances tagged "
                          f"orch-cluster={self.state.cloud_name} may remain on {cloud}: look for "
                          "them in its console, or run orch down again once it answers"],
            )
            result.warnings += await storage_steps.release(
                cluster_workflow_id(self.state.name), storage_steps.buckets_of(self.state.storage))
        if terminate:
            self.state.storage = []  # released, by the teardown or just above
            self._set_status(ClusterStatus.TERMINATED)
        else:
            self._set_status(ClusterStatus.STOPPED)
        return result

    # -- guards -------------------------------------------------------------------------
    def _require_not_gone(self) -> None:
        if self.state.status == ClusterStatus.TERMINATED:
            raise ApplicationError(
                f"cluster {self.state.name} is being torn down; try again in a moment",
                type="ClusterGone", non_retryable=True,
            )

    def _require_up(self) -> None:
        if self.state.status != ClusterStatus.UP:
            raise ApplicationError(
                f"cluster {self.state.name} is {self.state.status}, not UP",
                type="ClusterNotUp", non_retryable=True,
            )

    def _require_stoppable(self) -> None:
        self._require_not_gone()
        if self.state.status == ClusterStatus.STOPPED:
            raise ApplicationError(f"cluster {self.state.name} is already STOPPED",
                                   type="ClusterStopped", non_retryable=True)
        if self.state.placement is None:
            raise ApplicationError(f"cluster {self.state.name} was never provisioned",
                                   type="ClusterNotUp", non_retryable=True)
        if self.state.placement.use_spot:
            raise ApplicationError(
                f"cluster {self.state.name} runs on spot instances, which cannot be stopped; "
                "use orch down", type="CannotStop", non_retryable=True)

    def _require_startable(self) -> None:
        self._require_not_gone()
        if self.state.status not in (ClusterStatus.STOPPED, ClusterStatus.INIT) or (
            self.state.launched is None or self.state.placement is None
        ):
            raise ApplicationError(
                f"cluster {self.state.name} is {self.state.status}: only a stopped (or "
                "half-started) cluster can be started", type="ClusterNotStopped",
                non_retryable=True,
            )

    def _require_fit(self, task: Task) -> None:
        reason = misfit(task, self.state)
        if reason:
            raise ApplicationError(reason, type=TASK_DOES_NOT_FIT, non_retryable=True)
