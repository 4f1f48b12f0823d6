"""FailoverWorkflow: provision all N nodes somewhere, cheapest first.

Each round holds a launch permit of the LaunchSemaphoreWorkflow while it provisions,
and gives it back before any backoff sleep (so a launch waiting for capacity never
blocks others). For each candidate (and each of its zones): quota check → bulk
provision (all or nothing) → wait until running (``workflows/failover_calls.py``). A
failure is turned into a block rule by the pure ``orch.failover_rules`` and the partial
nodes are removed (or stopped, for a cluster that was ever up) and confirmed gone before
the next try; then the optimizer is asked again with the grown blocklist.
``retry_until_up`` sleeps on a durable timer between rounds. The result, or the failure,
carries the hops for the user (the latest ``HISTORY_KEPT``, and how many came before).

Failover always ends: a failure that blocks nothing (a transient fault or throttling that
outlived its activity retries) counts toward its place's retry limit, after which the place
is blocked like a zone (``orch.failover_rules.record_failure``); a throttled place is
retried only after a durable backoff, with no permit held. ``retry_until_up`` rounds
continue-as-new every ``rounds_per_run`` rounds (or when Temporal suggests it), carrying
the round count and the bounded history, so a launch that waits days for capacity keeps a
short history.

Nothing is left behind: each attempt tells the cluster's workflow its region before it
creates anything there (the cluster's record keeps it), and a round that ends removes what
its failed attempts made besides instances (security groups, firewall rules) in every
region but the cluster's, then tells the cluster those regions are clean; a region whose
cleanup failed stays in the record, for the teardown.

Cancellation (the launch was cancelled, or the managed job that started it) is not a
failed attempt: the nodes the cut-short attempt may have made are removed, the permit
is given back, and the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from orch.clouds.base import ClusterInfo
    from orch.clouds.errors import BlockScope
    from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
    from orch.contracts.provision import (
        InstancesRequest,
        ProvisionRequest,
    )
    from orch.failover_rules import (
        AttemptLog,
        Blocklist,
        Candidate,
        FailoverAttempt,
        Retries,
        record_failure,
        retry_backoff_s,
    )
    from orch.records import (
        FAILOVER_WORKFLOW,
        CloudRegion,
        LaunchProgress,
        Placement,
    )
    from orch.spec import Task
    from orch.summaries import attempt_line, attempt_phrase
    from workflows.failover_calls import (
        clean_region,
        provision_config,
        provision_nodes,
        remove_partial,
    )
    from workflows.options import (
        CLOUD_CALL,
        error_details,
        error_message,
        error_type,
        failure_kind,
        failure_scope,
    )
    from workflows.permits import acquire_permit
    from workflows.progress import ProgressReports

RETRY_ROUND_S = (30, 60, 120, 300)  # sleeps between rounds of --retry-until-up
ROUNDS_PER_RUN = 10  # --retry-until-up rounds per workflow run, then continue-as-new

# workflow.patched ids: a changed command sequence for histories recorded before it.
RETRY_LIMIT_PATCH = "failover-retry-limit"  # unblocked failures count; throttling backs off
CONTINUE_AS_NEW_PATCH = "failover-continue-as-new"  # retry-until-up rounds continue-as-new
CLEAN_REGIONS_PATCH = "failover-clean-regions"  # a round ends by cleaning its regions
PERMIT_NOTE_PATCH = "failover-permit-note"  # "got a launch permit" rides the next report
# A heartbeat timeout (a lost worker) blocks nothing, not the zone.
HEARTBEAT_SCOPE_PATCH = "failover-heartbeat-timeout-blocks-nothing"


REVISION = 1  # FailoverInput.revision of the failovers started now


class FailoverInput(BaseModel):
    cluster_name: str
    name_on_cloud: str = ""  # what instances are tagged with; "": cluster_name (old inputs)
    task: Task
    placement: Placement | None = None  # pinned: an existing cluster relaunches only there
    blocklist: Blocklist = Field(default_factory=Blocklist)  # blocked from the start
    was_up: bool = False  # partial nodes are stopped, not terminated, once a cluster was up
    retry_until_up: bool = False
    ssh_public_key: str | None = None
    report_to: str | None = None  # the workflow told of each hop (the cluster's), by signal
    # Read when the input is made (tests set the module constants for a faster clock).
    rounds_per_run: int = Field(default_factory=lambda: ROUNDS_PER_RUN)
    round_waits_s: list[int] = Field(default_factory=lambda: list(RETRY_ROUND_S))
    # Carried across continue-as-new: rounds already over, and the attempts so far.
    rounds: int = 0
    attempts: AttemptLog = Field(default_factory=AttemptLog)
    # REVISION: every patch above applies without its marker (a marker costs the run a
    # search-attribute upsert, a write of its visibility record); 0 in older inputs.
    revision: int = 0


class FailoverOutput(BaseModel):
    placement: Placement
    info: ClusterInfo
    history: list[FailoverAttempt] = Field(default_factory=list)  # the latest attempts
    older_attempts: int = 0  # attempts before those of ``history``


@workflow.defn(name=FAILOVER_WORKFLOW)
class FailoverWorkflow:
    def __init__(self) -> None:
        self.log = AttemptLog()
        self.blocklist = Blocklist()
        self.retries = Retries()  # this round's failures that blocked nothing, per place
        self.backoff_s = 0  # set by a throttled attempt: wait, without a permit, then go on
        self.touched: list[CloudRegion] = []  # regions this round reported (and may clean)
        self.created: list[CloudRegion] = []  # regions where this round called run_instances
        self.reports = ProgressReports(None)  # each awaited (workflows/progress.py)
        self.revision = 0  # FailoverInput.revision

    @workflow.query
    def attempts(self) -> list[FailoverAttempt]:
        return self.log.recent

    def _patched(self, patch_id: str) -> bool:
        return self.revision >= REVISION or workflow.patched(patch_id)

    @workflow.run
    async def run(self, request: FailoverInput) -> FailoverOutput:
        self.revision = request.revision
        self.blocklist = request.blocklist
        self.log = request.attempts
        rounds = request.rounds
        while True:
            await self._report(request, "waiting for a launch permit", waiting_for_permit=True)
            permit = await acquire_permit("launch", on_queued=lambda ahead: self._show(
                f"waiting for a launch permit: about {ahead} ahead when it queued"))
            if self._patched(PERMIT_NOTE_PATCH):
                self._show("got a launch permit")
                self.reports.note(LaunchProgress(step="got a launch permit",
                                                 waiting_for_permit=False))
            else:
                await self._report(request, "got a launch permit", waiting_for_permit=False)
            try:
                output = await self._round(request)
            except asyncio.CancelledError:
                await self._clean_regions(request, keep=None)
                raise
            finally:
                await permit.release()
            if output is not None or not self.backoff_s:  # the round is over
                await self._clean_regions(request, keep=output.placement if output else None)
            if output is not None:
                return output
            if self.backoff_s:
                await self._back_off(request)
                continue  # the same round goes on: its blocklist and retry counts stay
            if not request.retry_until_up:
                raise ApplicationError(
                    "no candidate could provision the cluster",
                    {"attempts": [a.model_dump(mode="json") for a in self.log.recent],
                     "older_attempts": self.log.older},
                    type="NoResourcesError",
                    non_retryable=True,
                )
            waits = request.round_waits_s or list(RETRY_ROUND_S)
            delay = waits[min(rounds, len(waits) - 1)]
            rounds += 1
            workflow.logger.info("no candidate left; retrying in %s s", delay)
            last = self.log.recent[-1] if self.log.recent else None
            self._show(f"backing off {delay} s after round {rounds}"
                       + (f" ({attempt_phrase(last)})" if last else "")
                       + ": --retry-until-up, no launch permit held meanwhile")
            await workflow.sleep(timedelta(seconds=delay))
            self.blocklist = request.blocklist
            self.retries = Retries()
            self._continue_as_new_if_due(request, rounds)

    def _continue_as_new_if_due(self, request: FailoverInput, rounds: int) -> None:
        """Between rounds (no permit held, no nodes left): start a fresh run that carries the
        round count and the bounded history, so the workflow's history stays short."""
        due = (rounds - request.rounds >= request.rounds_per_run
               or workflow.info().is_continue_as_new_suggested())
        if due and self._patched(CONTINUE_AS_NEW_PATCH):
            workflow.continue_as_new(request.model_copy(
                update={"rounds": rounds, "attempts": self.log}))

    async def _back_off(self, request: FailoverInput) -> None:
        """The cloud throttled us: wait on a durable timer (no permit held), then retry. A
        cancel meanwhile ends the round: its regions are cleaned."""
        delay, self.backoff_s = self.backoff_s, 0
        self._show(f"throttled: backing off {delay} s before trying again, no launch permit "
                   "held meanwhile")
        try:
            await workflow.sleep(timedelta(seconds=delay))
        except asyncio.CancelledError:
            await self._clean_regions(request, keep=None)
            raise

    async def _round(self, request: FailoverInput) -> FailoverOutput | None:
        """Try candidates, asking the optimizer again after each failure, until one
        provisions or none is left."""
        while True:
            try:
                candidates = await workflow.execute_activity(
                    PLAN_CANDIDATES,
                    PlanRequest(task=request.task, blocklist=self.blocklist,
                                placement=request.placement),
                    result_type=list[Candidate], **CLOUD_CALL,
                    summary=f"plan: candidates cheapest first, {self.log.total} blocked by "
                            "earlier attempts",
                )
            except ActivityError as err:
                if error_type(err) != "NoCandidatesError" or not self.log.total:
                    raise
                return None
            if not candidates:
                return None
            tried = self.log.total
            output = await self._try_candidate(request, candidates[0])
            if output is not None or self.backoff_s:
                return output
            if self.log.total == tried:
                return None  # every zone of the best candidate was already blocked

    async def _try_candidate(
        self, request: FailoverInput, candidate: Candidate
    ) -> FailoverOutput | None:
        """Try each unblocked zone of ``candidate``; None when every zone failed."""
        zones: list[str | None] = list(candidate.zones) or [None]
        for zone in zones:
            if self.blocklist.blocks(candidate.cloud, candidate.region, zone,
                                     candidate.instance_type, candidate.use_spot):
                continue
            outcome = await self._try_zone(request, candidate, zone)
            if isinstance(outcome, FailoverOutput):
                return outcome
            if outcome in (BlockScope.REGION, BlockScope.CLOUD) or self.backoff_s:
                return None
        return None

    async def _try_zone(self, request: FailoverInput, candidate: Candidate, zone: str | None
                        ) -> FailoverOutput | BlockScope:
        """One attempt: the cluster provisioned there, or the scope its failure blocks
        (its partial nodes removed)."""
        cloud_name = request.name_on_cloud or request.cluster_name
        instances = InstancesRequest(
            cloud=candidate.cloud, region=candidate.region, cluster_name=cloud_name
        )
        config = provision_config(request.task, candidate, zone, cloud_name,
                                  f"{workflow.info().workflow_id}/{self.log.total}",
                                  request.ssh_public_key)
        where = " ".join(filter(None, [candidate.cloud, candidate.region, zone,
                                       candidate.instance_type,
                                       "spot" if candidate.use_spot else None]))
        here = CloudRegion(cloud=candidate.cloud, region=candidate.region)
        if here not in self.touched:
            self.touched.append(here)
        await self._report(request, f"provisioning on {where}"
                           + (f" (${candidate.price_per_hour:.2f}/h)"
                              if candidate.price_per_hour else ""), touched=here)
        try:
            info = await provision_nodes(
                ProvisionRequest(cloud=candidate.cloud, config=config), instances,
                request.cluster_name, on_create=lambda: self._creating_in(here))
        except (ActivityError, asyncio.CancelledError) as err:
            if not isinstance(err, ActivityError) or is_cancelled_exception(err):
                await remove_partial(instances, request.was_up)
                raise
            scope = await self._failed(request, candidate, zone, err)
            try:
                await remove_partial(instances, request.was_up)
            except ActivityError:
                if scope != BlockScope.CLOUD:
                    raise  # a partial cluster we cannot remove: stop here, say so
                # The cloud rejects us altogether (credentials): nothing was created
                # by calls it refused, and nothing can be cleaned with it.
                self.created = [r for r in self.created if r != here]
                await self._report(request, f"{where}: no cleanup possible "
                                            f"({self.log.recent[-1].error_type})")
            return scope
        placement = Placement(
            cloud=candidate.cloud, region=candidate.region, zone=zone,
            instance_type=candidate.instance_type, use_spot=candidate.use_spot,
        )
        return FailoverOutput(placement=placement, info=info,
                              history=self.log.recent, older_attempts=self.log.older)

    def _creating_in(self, here: CloudRegion) -> None:
        if here not in self.created:
            self.created.append(here)

    async def _failed(self, request: FailoverInput, candidate: Candidate, zone: str | None,
                      err: ActivityError) -> BlockScope:
        """Record a failed attempt, grow the blocklist by its rule, and say so; a throttled
        attempt also sets the backoff. Returns the error's scope."""
        kind = failure_kind(err) or "Error"
        details = error_details(err)
        scope = (failure_scope(err) if self._patched(HEARTBEAT_SCOPE_PATCH)
                 else BlockScope(details.get("scope", BlockScope.ZONE)))
        counted = scope == BlockScope.NONE and self._patched(RETRY_LIMIT_PATCH)
        retries = self.retries.of(candidate, zone) if counted else 0
        attempt = record_failure(candidate, zone, kind, str(details.get("code", "")),
                                 error_message(err), scope, retries=retries)
        self.log = self.log.add(attempt)
        if counted:
            self.retries = self.retries.after(attempt)
            self.backoff_s = retry_backoff_s(attempt, retries)
        await self._report(request, attempt_line(attempt))
        self.blocklist = self.blocklist.add(attempt.block)
        return scope

    def _show(self, now: str) -> None:
        """The Web UI's current details: the step, and the attempts so far."""
        lines = [f"**Now:** {now}"]
        if self.log.recent:
            lines.append(f"**Attempts:** {self.log.total}, last: "
                         + attempt_phrase(self.log.recent[-1]))
        workflow.set_current_details("\n\n".join(lines))

    async def _report(self, request: FailoverInput, step: str,
                      waiting_for_permit: bool | None = None, touched: CloudRegion | None = None,
                      cleaned: list[CloudRegion] | None = None) -> None:
        workflow.logger.info("%s", step)
        self._show(step)
        await self.reports.send(request.report_to, LaunchProgress(
            step=step, waiting_for_permit=waiting_for_permit, touched=touched,
            cleaned=cleaned or []))

    async def _clean_regions(self, request: FailoverInput, keep: Placement | None) -> None:
        """The round is over: remove what its attempts made besides instances (security
        groups, firewall rules; their instances are gone already) in every region it
        created in but ``keep``'s, the cluster's, and tell the cluster's workflow which
        regions hold nothing of it any more. A region whose cleanup fails stays in the
        cluster's record: its teardown cleans it. A cluster that was up keeps its
        stopped nodes, and so their network."""
        touched, created, self.touched, self.created = self.touched, self.created, [], []
        if request.was_up or not touched or not self._patched(CLEAN_REGIONS_PATCH):
            return
        cleaned = [
            place for place in touched
            if (keep is None or (keep.cloud, keep.region) != (place.cloud, place.region))
            and (place not in created or await self._clean_region(request, place))
        ]
        if not cleaned:
            return
        # The cluster's workflow may be gone (terminated, which is what cancelled us).
        with contextlib.suppress(FailureError):
            await self._report(request, "cleaned up after the failed attempts in "
                               + ", ".join(f"{p.cloud} {p.region}" for p in cleaned),
                               cleaned=cleaned)

    async def _clean_region(self, request: FailoverInput, place: CloudRegion) -> bool:
        """Whether ``place`` holds nothing of the cluster any more (its instances are
        gone: only its security group or firewall rule may be left)."""
        instances = InstancesRequest(cloud=place.cloud, region=place.region,
                                     cluster_name=request.name_on_cloud or request.cluster_name)
        error = await clean_region(instances, request.cluster_name)
        if error is not None:
            self._show(f"cleanup of {place.cloud} {place.region} left for the teardown: "
                       f"{error}")
        return error is None
