"""ClusterWorkflow's upkeep: its two durable timers (autostop after the idle minutes,
a periodic refresh against the cloud) and the Updates that drive them by hand
(``set_autostop``, ``refresh``). Both skip their turn while an operation holds the lock.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import InstanceStatus
    from orch.contracts.provision import QUERY_INSTANCES, InstancesRequest
    from orch.contracts.runtime import (
        JOBS_ACTIVITY,
        RAY_HEALTHY,
        HealthRequest,
        JobsActivity,
        NodesRequest,
    )
    from orch.lifecycle import refresh_verdict
    from orch.records import AutostopRequest, ClusterRecord
    from orch.status import ClusterStatus
    from orch.summaries import instances_call, on_nodes
    from workflows.cluster_base import AUTOSTOP_RECHECK, REFRESH_EVERY, ClusterBase
    from workflows.options import BEST_EFFORT, PROVIDER_CALL


class ClusterUpkeep(ClusterBase):
    """The timers, autostop and refresh (see the module docstring)."""

    def _next_wakeup(self) -> datetime | None:
        moments = [self.state.autostop_at]
        if self.state.status in (ClusterStatus.UP, ClusterStatus.STOPPED):
            last = self.state.last_refresh_at or workflow.now()
            moments.append(last + REFRESH_EVERY)
        due = [m for m in moments if m is not None]
        return min(due) if due else None

    async def _on_timer(self) -> None:
        """A timer fired: autostop if idle long enough, refresh if due. An operation in
        progress wins: it restarts the idle clock, and a refresh must not race it."""
        if self.lock.locked():
            # The operation restarts the idle clock when it ends; look again after it.
            await workflow.wait_condition(lambda: not self.lock.locked())
            return
        async with self.lock:
            autostop_at = self.state.autostop_at
            if autostop_at is not None and workflow.now() >= autostop_at:
                await self._autostop_if_idle()
            last = self.state.last_refresh_at
            if self.state.status in (ClusterStatus.UP, ClusterStatus.STOPPED) and (
                last is None or workflow.now() >= last + REFRESH_EVERY
            ):
                await self._refresh()

    # -- autostop -----------------------------------------------------------------------
    @workflow.update
    async def set_autostop(self, request: AutostopRequest) -> ClusterRecord:
        self._require_not_gone()
        self.state.autostop = request.setting
        self._touch()
        return self.state

    async def _autostop_if_idle(self) -> None:
        """The idle deadline passed: ask the head whether jobs ran since, then act."""
        if self.state.status != ClusterStatus.UP or self.state.info is None:
            self.state.last_activity_at = workflow.now()  # nothing to stop now; look later
            return
        try:
            jobs = await workflow.execute_activity(
                JOBS_ACTIVITY, NodesRequest(info=self.state.info), result_type=JobsActivity,
                **BEST_EFFORT,
                summary="autostop: read the head's job table for activity",
            )
        except ActivityError:
            self.state.last_activity_at = workflow.now()  # head unreachable: try again later
            return
        previous = self.state.last_activity_at or workflow.now()
        reported = jobs.last_activity_at
        self.state.autostop_check_after = None
        if jobs.active:
            self.state.last_activity_at = workflow.now()
            self.state.autostop_check_after = workflow.now() + AUTOSTOP_RECHECK
        elif reported is not None and reported > previous:
            self.state.last_activity_at = reported
        else:
            assert self.state.autostop is not None
            down = self.state.autostop.down
            workflow.logger.info("cluster idle: autostop %s", "down" if down else "stop")
            await self._teardown(terminate=down, purge=False)
            return
        self.schedule_changed = True
        self._publish()

    # -- refresh ------------------------------------------------------------------------
    @workflow.update
    async def refresh(self) -> ClusterRecord:
        """Check the record against the cloud. While an operation runs (a launch creating
        the cluster, say) the record is returned as it is: nothing is concluded."""
        if self.lock.locked():
            return self.state
        async with self.lock:
            await self._refresh()
            return self.state

    async def _refresh(self) -> None:
        self.state.last_refresh_at = workflow.now()
        placement = self.state.placement
        if placement is None or self.state.status == ClusterStatus.TERMINATED:
            return
        found = await workflow.execute_activity(
            QUERY_INSTANCES,
            InstancesRequest(cloud=placement.cloud, region=placement.region,
                             cluster_name=self.state.cloud_name),
            result_type=dict[str, InstanceStatus], **PROVIDER_CALL,
            summary="refresh: " + instances_call("describe", placement.cloud, placement.region,
                                                 self.state.name),
        )
        expected = [n.instance_id for n in self.state.info.nodes] if self.state.info else []
        healthy = None
        all_running = found and all(s == InstanceStatus.RUNNING for s in found.values())
        if self.state.status == ClusterStatus.UP and all_running and self.state.info:
            assert self.state.gcs_address is not None
            healthy = await workflow.execute_activity(
                RAY_HEALTHY,
                HealthRequest(info=self.state.info, gcs_address=self.state.gcs_address),
                result_type=bool, **BEST_EFFORT,
                summary=on_nodes("refresh: check Ray", self.state.info),
            )
        verdict = refresh_verdict(self.state.status, expected, found, healthy)
        self.state.warnings = [f"instances tagged for this cluster but not in its record "
                               f"(leaked?): {', '.join(verdict.leaked)}"] if verdict.leaked else []
        if verdict.status != self.state.status or verdict.reason != self.state.status_reason:
            self._set_status(verdict.status, reason=verdict.reason)
