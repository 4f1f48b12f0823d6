"""Ask the optimizer for launch candidates (it reads the catalog, so it is an activity)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from orch.check import enabled_clouds
from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
from orch.failover_rules import Candidate
from orch.optimizer import OptimizerError, plan
from orch.settings import load_settings
from orch.spec import SpecError


@activity.defn(name=PLAN_CANDIDATES)
def plan_candidates(request: PlanRequest) -> list[Candidate]:
    task = request.task
    if request.placement is not None:
        pinned = {"cloud": request.placement.cloud, "region": request.placement.region}
        if request.placement.zone:
            pinned["zone"] = request.placement.zone
        resources = task.resources.model_copy(update=pinned)
        task = task.model_copy(update={"resources": resources})
    try:
        settings = load_settings()  # the worker's config, re-read at each launch
        return plan(task, blocklist=request.blocklist, enabled_clouds=enabled_clouds(),
                    allowed_clouds=settings.allowed_clouds,
                    default_regions=settings.default_regions())
    except (OptimizerError, SpecError) as exc:
        raise ApplicationError(str(exc), type="NoCandidatesError", non_retryable=True) from exc
