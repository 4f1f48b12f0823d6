"""What every part of ManagedJobWorkflow shares: the job's record (its events, status,
memo and search attributes, continue-as-new) and the teardown of its clusters. The
launch rounds (``workflows/managed_job_launch.py``) build on it, and the workflow
(``workflows/managed_job.py``) on both.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orch.bulk_teardown import (
        BULK_TEARDOWN_ID,
        HAND_OVER_ACTIVITY,
        HAND_OVER_SIGNAL,
        HandedOver,
    )
    from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
    from orch.failover_rules import Candidate
    from orch.managed_jobs import (
        MEMO_SUMMARY,
        EventKind,
        LaunchPhase,
        ManagedJobInput,
        ManagedJobState,
        ManagedJobStatus,
        ScheduleState,
        TaskRun,
        summarize,
    )
    from orch.records import (
        SA_CLOUD,
        SA_CLUSTER,
        SA_CLUSTER_STATUS,
        SA_JOB_ID,
        SA_JOB_STATUS,
        SA_NUM_NODES,
        SA_REGION,
        SA_RESOURCES,
        Placement,
        TeardownInput,
        cluster_workflow_id,
    )
    from orch.semaphore import ReleaseRequest
    from orch.spec import Task
    from orch.status import ClusterStatus
    from orch.summaries import job_details, teardown_summary
    from workflows import storage_steps
    from workflows.options import CLOUD_CALL, error_message
    from workflows.teardown import TeardownWorkflow


def _search_attributes(job_id: int, status: ManagedJobStatus,
                       cluster: tuple[str, ClusterStatus, str, str, str, int] | None
                       ) -> list[SearchAttributeUpdate]:
    """The job's search attributes: its id and status, and its cluster's (name, status,
    cloud, region, resources, nodes), unset while it has none."""
    updates: list[SearchAttributeUpdate] = [
        SearchAttributeKey.for_keyword(SA_JOB_ID).value_set(str(job_id)),
        SearchAttributeKey.for_keyword(SA_JOB_STATUS).value_set(status),
    ]
    cluster_keys = [SearchAttributeKey.for_keyword(k) for k in (
        SA_CLUSTER, SA_CLUSTER_STATUS, SA_CLOUD, SA_REGION, SA_RESOURCES)]
    nodes_key = SearchAttributeKey.for_int(SA_NUM_NODES)
    if cluster is None:
        return updates + [key.value_unset() for key in cluster_keys] + [nodes_key.value_unset()]
    *values, nodes = cluster
    return updates + [key.value_set(value) for key, value in zip(cluster_keys, values,
                                                                 strict=True)
                      ] + [nodes_key.value_set(nodes)]


# Waits before each new try of a teardown that failed (see ``_teardown``).
TEARDOWN_RETRY_WAITS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
# workflow.patched id: a cancelled job hands its cluster (and its job slot) to the bulk
# teardown instead of running a TeardownWorkflow child (histories recorded before did).
HAND_OVER_PATCH = "cancelled-job-hands-cluster-to-bulk-teardown"


class ManagedJobBase:
    """The record and the cleanup; the attributes are set by ManagedJobWorkflow.__init__."""

    input: ManagedJobInput
    tasks: list[Task]
    state: ManagedJobState
    continuing: bool
    cancel_requested: bool
    cancelled_by_bulk_teardown: bool
    published: tuple[object, ...] | None
    published_memo: tuple[object, ...] | None
    published_attributes: tuple[object, ...] | None
    publish_due: bool

    @property
    def _older_job(self) -> bool:
        """Submitted before revision 1 (``orch.managed_jobs.JOB_REVISION``): it replays
        LaunchWorkflow children, upserts at each change and records patch markers."""
        return self.input.revision < 1

    async def _release_buckets(self) -> None:
        """The job is over: it no longer uses its buckets, and each one's entity deletes
        it when no cluster or other job does and it does not persist."""
        if not self.state.buckets:
            return
        said = await storage_steps.release(workflow.info().workflow_id, self.state.buckets)
        self.state.buckets = []
        for line in said:
            self._event(EventKind.TEARDOWN, line)

    async def _sweep(self, run: TaskRun) -> None:
        """A launch cut short (cancelled) before it said where it provisions: terminate the
        cluster's instances wherever the launch could have put them."""
        phase = run.plan.current if run.plan is not None else LaunchPhase()
        request = PlanRequest(task=self.tasks[run.index], blocklist=phase.blocklist,
                              placement=phase.pin)
        try:
            candidates = await workflow.execute_activity(
                PLAN_CANDIDATES, request, result_type=list[Candidate], **CLOUD_CALL,
                summary=f"plan: where a cut-short launch of {run.cluster_name} may have "
                        "provisioned")
        except ActivityError:
            candidates = []  # nowhere it could have provisioned
        for cloud, region in dict.fromkeys((c.cloud, c.region) for c in candidates):
            run.placement = Placement(cloud=cloud, region=region)
            await self._teardown(run, quiet_if_empty=True)
        run.launching = False

    async def _teardown(self, run: TaskRun, quiet_if_empty: bool = False) -> None:
        """Terminate the task's cluster, if any instance may exist; forget it either way.

        A teardown that fails (its cloud calls kept failing through their own retries)
        is tried again after each of TEARDOWN_RETRY_WAITS, on durable timers: a cloud
        API outage of minutes must not leak the cluster. Only then is it given up, with
        where its instances may remain in the controller log."""
        placement = run.placement
        if placement is not None:
            for wait in (*TEARDOWN_RETRY_WAITS, None):
                try:
                    result = await workflow.execute_child_workflow(
                        TeardownWorkflow.run,
                        TeardownInput(cluster_name=run.cluster_name,
                                      name_on_cloud=run.name_on_cloud, placement=placement,
                                      info=run.info, terminate=True, storage=run.storage,
                                      storage_user=cluster_workflow_id(run.cluster_name)),
                        id=self._child_id("down", run),
                        parent_close_policy=ParentClosePolicy.ABANDON,
                        static_summary=teardown_summary(run.cluster_name, placement, run.info,
                                                        terminate=True),
                    )
                except ChildWorkflowError as err:
                    then = (f"trying again in {wait}" if wait is not None else
                            "instances tagged orch-cluster="
                            f"{run.cloud_name} may remain "
                            f"on {placement.cloud}/{placement.region}")
                    self._event(EventKind.TEARDOWN, f"teardown of {run.cluster_name} failed: "
                                                    f"{error_message(err)}; {then}", run)
                    if wait is None:
                        break
                    await workflow.sleep(wait)
                    continue
                if result.instances or not quiet_if_empty:
                    self._event(EventKind.TEARDOWN,
                                "; ".join([result.message, *result.warnings]), run)
                break
        self._forget_cluster(run)

    def _hands_over(self, run: TaskRun) -> bool:
        """Whether the cluster goes to the bulk teardown: a cancelled job's, on which no
        bucket is mounted (TeardownWorkflow unmounts them first: a cached mount writes
        back) and with no bucket of the job's to release."""
        return (self.state.status == ManagedJobStatus.CANCELLING and not run.storage
                and not self.state.buckets
                and (not self._older_job or workflow.patched(HAND_OVER_PATCH)))

    async def _hand_over(self, run: TaskRun) -> None:
        """Hand the cluster, and the job slot, to the bulk teardown (``orch.bulk_teardown``),
        which terminates it with the clusters of other cancelled jobs and then gives the
        slot back. When the entity cancelled the job, the cluster is left in the job's
        result, which the entity reads; else it is signalled over, the entity started by
        the hand-over activity when it is not running, and if even that fails, the job
        tears the cluster down itself."""
        placement, state = run.placement, self.state
        assert placement is not None
        slot = (ReleaseRequest(kind="job", request_id=state.slot_request_id)
                if state.slot_request_id is not None else None)
        cluster = HandedOver(owner=workflow.info().workflow_id, cluster_name=run.cluster_name,
                             cloud_name=run.cloud_name,
                             cloud=placement.cloud, region=placement.region, slot=slot)
        if self.cancelled_by_bulk_teardown:  # it reads the job's result: no signal to wait on
            state.left_clusters.append(cluster)
            self._handed(run, "left in the job's result to the bulk teardown "
                              f"({BULK_TEARDOWN_ID}) that cancelled it")
            return
        try:
            await workflow.get_external_workflow_handle(BULK_TEARDOWN_ID).signal(
                HAND_OVER_SIGNAL, cluster)
        except ApplicationError:  # not running: the activity starts it
            try:
                await workflow.execute_activity(
                    HAND_OVER_ACTIVITY, cluster, **CLOUD_CALL,
                    summary=f"hand {run.cluster_name} to the bulk teardown")
            except ActivityError as err:
                self._event(EventKind.TEARDOWN, f"hand-over of {run.cluster_name} failed: "
                                                f"{error_message(err)}", run)
                await self._teardown(run)
                return
        self._handed(run, f"handed to the bulk teardown ({BULK_TEARDOWN_ID})")

    def _handed(self, run: TaskRun, how: str) -> None:
        """The cluster and the job slot are the bulk teardown's now."""
        self.state.slot_request_id = None
        self._event(EventKind.TEARDOWN, f"{run.cluster_name} {how}, which terminates it "
                                        "with the clusters of other cancelled jobs", run)
        self._forget_cluster(run)

    def _forget_cluster(self, run: TaskRun) -> None:
        """The cluster is gone (or being made so): count its time, clear it from the run."""
        if run.placement is not None:
            run.usage.gone(run.placement, len(run.info.nodes) if run.info else 0, run.resources,
                           workflow.now())
        run.placement = run.info = run.gcs_address = None
        run.cluster_up, run.cluster_job_id, run.resources = False, 0, ""
        run.storage = []
        self._publish()

    # -- plumbing ------------------------------------------------------------------------
    def _check_cancel(self) -> None:
        """Raise the cancellation a child may have swallowed."""
        if self.cancel_requested:
            raise asyncio.CancelledError()

    def _continue_as_new_if_due(self) -> None:
        info = workflow.info()
        if (info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= self.input.max_events_per_run):
            self.continuing = True
            self._publish_if_due()
            workflow.continue_as_new(self.input.model_copy(update={"state": self.state}))

    def _child_id(self, kind: str, run: TaskRun) -> str:
        self.state.children += 1
        return f"{workflow.info().workflow_id}/{kind}-{run.index}-{self.state.children}"

    def _event(self, kind: EventKind, message: str, run: TaskRun | None = None) -> None:
        task = run.index if run is not None else None
        workflow.logger.info("job %s: %s %s", self.state.job_id, kind, message)
        self.state.record(workflow.now(), kind, message, task)
        workflow.set_current_details(job_details(self.state))

    def _set_status(self, status: ManagedJobStatus, schedule: ScheduleState) -> None:
        self.state.status, self.state.schedule_state = status, schedule
        if not self.state.current.status.is_terminal:
            self.state.current.status = status
        self._publish()
        workflow.set_current_details(job_details(self.state))

    def _publish(self) -> None:
        """The memo (for `orch jobs queue`) and, when enabled, the search attributes that
        put the job's cluster in `orch status`; upserted only when they change.

        Each upsert is a write of the job's visibility record. A job of revision 1 upserts
        when its code next yields rather than at each change (a cancel sets CANCELLING,
        forgets the cluster and sets CANCELLED in one workflow task: the memo written twice
        instead of three times), and its search attributes only when one of them changes
        (a launch step changes the memo only). The run's end and its continue-as-new
        publish first (:meth:`_publish_if_due`): nothing may follow their command."""
        if self._older_job:
            self._publish_now()
        elif not self.publish_due:
            self.publish_due = True
            asyncio.get_running_loop().call_soon(self._publish_if_due)

    def _publish_if_due(self) -> None:
        if self.publish_due:
            self.publish_due = False
            self._publish_now()

    def _publish_now(self) -> None:
        state, run = self.state, self.state.current
        summary = summarize(state).model_dump(mode="json")
        memo = tuple(sorted(summary.items()))
        cluster_status = (ClusterStatus.UP if run.cluster_up
                          else ClusterStatus.INIT if run.placement is not None else None)
        cluster = None if cluster_status is None or run.placement is None else (
            run.cluster_name, cluster_status, run.placement.cloud, run.placement.region,
            run.resources, len(run.info.nodes) if run.info else 0)
        attributes = (state.job_id, state.status, cluster)
        if self._older_job:  # both upserted whenever either changed
            current = (memo, cluster_status, run.resources)
            if current == self.published:
                return
            self.published = current
            self.published_memo = self.published_attributes = None
        if memo != self.published_memo:
            self.published_memo = memo
            workflow.upsert_memo({MEMO_SUMMARY: summary})
        if not self.input.publish_search_attributes:
            return  # the time-skipping test server has no custom search attributes
        if attributes != self.published_attributes:
            self.published_attributes = attributes
            workflow.upsert_search_attributes(_search_attributes(*attributes))
