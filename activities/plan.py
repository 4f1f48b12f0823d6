"""Ask the optimizer for launch candidates (it reads the catalog, so it is an activity)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from orch.check import enabled_clouds
from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
from orch.failover_rules import Candidate
from orch.optimizer import OptimizerError, plan
from orch.records import Placement
from orch.settings import load_settings
from orch.spec import Resources, SpecError, Task


def pinned_to(task: Task, placement: Placement) -> Task:
    """``task`` asking only for where an existing cluster lives (a start, a relaunch).

    Every choice of an ``any_of``/``ordered`` list names its own place, which would win
    over one pinned on the list's parent: so the choices that fit the placement are kept,
    each pinned to it, and the others dropped (a stopped cluster restarts where its disks
    are, never in the region an ``ordered`` list tries first).
    """
    pin = {"cloud": placement.cloud, "region": placement.region}
    if placement.zone:
        pin["zone"] = placement.zone
    choices = task.resources.alternatives()
    fitting = [choice for choice in choices if _fits(choice, pin)] or choices[:1]
    if len(fitting) == 1:
        resources = fitting[0].model_copy(update=pin)
    else:
        kind = "ordered" if task.resources.is_ordered else "any_of"
        resources = Resources.model_validate({kind: [
            {**choice.model_dump(exclude_unset=True), **pin} for choice in fitting]})
    return task.model_copy(update={"resources": resources})


def _fits(choice: Resources, pin: dict[str, str]) -> bool:
    return all(getattr(choice, part) in (None, value) for part, value in pin.items())


@activity.defn(name=PLAN_CANDIDATES)
def plan_candidates(request: PlanRequest) -> list[Candidate]:
    task = request.task
    if request.placement is not None:
        task = pinned_to(task, request.placement)
    try:
        settings = load_settings()  # the worker's config, re-read at each launch
        return plan(task, blocklist=request.blocklist, enabled_clouds=enabled_clouds(),
                    allowed_clouds=settings.allowed_clouds,
                    default_regions=settings.default_regions())
    except (OptimizerError, SpecError) as exc:
        raise ApplicationError(str(exc), type="NoCandidatesError", non_retryable=True) from exc
