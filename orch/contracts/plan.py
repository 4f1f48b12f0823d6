"""The planning activity's contract: its name and request (``activities/plan.py``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from orch.failover_rules import Blocklist
from orch.records import Placement
from orch.spec import Task

PLAN_CANDIDATES = "plan_candidates"  # -> list[orch.failover_rules.Candidate]


class PlanRequest(BaseModel):
    task: Task
    blocklist: Blocklist = Field(default_factory=Blocklist)
    placement: Placement | None = None  # an existing cluster relaunches only where it lives
