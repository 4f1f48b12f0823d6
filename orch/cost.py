"""What `orch cost-report` computes: hours up × the catalog's $/h, per cluster and per
managed job, from the records the workflows keep (no cloud billing API is asked).

Hours are the time a cluster was UP (``UsageClock``): from each UP to the next STOPPED or
TERMINATED, so stopped time is not billed, nor the minutes of provisioning before UP. A
managed job sums the clusters of its tasks, one per recovery, each priced where it ran.
The price is the catalog's on-demand (or spot) $/h of the instance type in the cluster's
zone (the region's cheapest when the zone is not known) × its nodes; the local cloud
costs nothing; an instance type the catalog lacks has no price (shown as such, and left
out of the total).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from orch.catalog import CATALOG_CLOUDS, load_catalog
from orch.managed_jobs import ManagedJobState
from orch.records import ClusterRecord, ClusterUsage, Placement

LOCAL_CLOUD = "local"


def hourly_price(placement: Placement) -> float | None:
    """$/h of one instance there (None: the catalog has no such offer)."""
    if placement.cloud == LOCAL_CLOUD:
        return 0.0
    if placement.cloud not in CATALOG_CLOUDS or not placement.instance_type:
        return None
    rows = [r for r in load_catalog(placement.cloud).rows_of_type(placement.instance_type)
            if r.region == placement.region]
    in_zone = [r for r in rows if placement.zone and r.zone == placement.zone]
    prices = [p for r in (in_zone or rows) if (p := r.price_for(placement.use_spot)) is not None]
    return min(prices) if prices else None


class CostLine(BaseModel):
    """One row of the report: a cluster (live or torn down) or a managed job."""

    name: str
    kind: str  # "cluster" or "managed job"
    status: str
    resources: str
    launched_at: datetime | None = None
    hours: float
    price_per_hour: float | None  # all its nodes (None: not in the catalog)
    cost: float | None  # None when some stretch has no price


class CostReport(BaseModel):
    lines: list[CostLine]
    total: float  # over the lines that have a cost
    unpriced: int  # lines left out of the total


def price_usage(usage: list[ClusterUsage]) -> tuple[float, float | None, float | None]:
    """Hours, the $/h of the latest stretch (all its nodes), and the cost of them all."""
    hours = sum(u.seconds for u in usage) / 3600
    cost: float | None = 0.0
    rate: float | None = None
    for stretch in usage:
        one = hourly_price(stretch.placement)
        rate = None if one is None else one * stretch.num_nodes
        cost = None if cost is None or rate is None else cost + rate * stretch.seconds / 3600
    return hours, rate, cost


def cluster_line(record: ClusterRecord, now: datetime) -> CostLine:
    """A cluster's row; a torn-down one's clock stopped at its teardown."""
    usage = record.usage.until(now, record.placement, record.num_nodes, record.task_resources)
    hours, rate, cost = price_usage(usage)
    resources = record.task_resources or (usage[-1].resources if usage else "")
    return CostLine(name=record.name, kind="cluster", status=record.status,
                    resources=resources, launched_at=record.launched_at, hours=hours,
                    price_per_hour=rate, cost=cost)


def job_line(state: ManagedJobState, now: datetime) -> CostLine:
    """A managed job's row: every cluster of every task, each priced where it ran."""
    usage: list[ClusterUsage] = []
    for run in state.runs:
        nodes = len(run.info.nodes) if run.info else 0
        usage += run.usage.until(now, run.placement, nodes, run.resources)
    hours, rate, cost = price_usage(usage)
    label = f"job {state.job_id}" + (f" ({state.name})" if state.name else "")
    return CostLine(name=label, kind="managed job", status=state.status,
                    resources=usage[-1].resources if usage else "",
                    launched_at=state.started_at, hours=hours, price_per_hour=rate, cost=cost)


def report(lines: list[CostLine]) -> CostReport:
    """The lines (clusters first, most expensive first) and their total."""
    ordered = sorted(lines, key=lambda line: (line.kind != "cluster", -(line.cost or 0.0),
                                              line.name))
    priced = [line.cost for line in ordered if line.cost is not None]
    return CostReport(lines=ordered, total=sum(priced), unpriced=len(ordered) - len(priced))
