"""What `orch cost-report` computes: catalog prices × nodes × hours up, per cluster (stopped
time excluded) and per managed job (each of its clusters priced where it ran)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orch.catalog import CatalogRow, load_catalog
from orch.clouds.base import ClusterInfo, NodeInfo
from orch.cost import cluster_line, hourly_price, job_line, report
from orch.managed_jobs import ManagedJobStatus, new_state
from orch.records import ClusterRecord, Placement, UsageClock
from orch.spec import Task
from orch.status import ClusterStatus

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def spot_row(cloud: str = "aws") -> CatalogRow:
    """A real catalog row with a spot offer, in a zone."""
    return next(r for r in load_catalog(cloud).rows if r.spot_price and r.zone)


def placement_of(row: CatalogRow, spot: bool = False, zone: bool = True) -> Placement:
    return Placement(cloud=row.cloud, region=row.region, zone=row.zone if zone else None,
                     instance_type=row.instance_type, use_spot=spot)


def test_prices_come_from_the_catalog_row_of_the_zone_on_demand_or_spot() -> None:
    row = spot_row()
    assert hourly_price(placement_of(row)) == row.price
    assert hourly_price(placement_of(row, spot=True)) == row.spot_price
    region_rows = [r for r in load_catalog(row.cloud).rows
                   if r.instance_type == row.instance_type and r.region == row.region]
    cheapest_spot = min(r.spot_price for r in region_rows if r.spot_price is not None)
    assert hourly_price(placement_of(row, spot=True, zone=False)) == cheapest_spot


def test_local_is_free_and_an_unknown_instance_type_has_no_price() -> None:
    assert hourly_price(Placement(cloud="local", region="local")) == 0.0
    assert hourly_price(Placement(cloud="aws", region="us-east-1",
                                  instance_type="no-such.type")) is None
    assert hourly_price(Placement(cloud="aws", region="us-east-1")) is None


def cluster(row: CatalogRow, nodes: int = 2) -> ClusterRecord:
    return ClusterRecord(name="train", placement=placement_of(row), num_nodes=nodes,
                         task_resources=f"{nodes}x {row.cloud}({row.instance_type})",
                         launched_at=T0)


def test_stopped_time_is_not_billed() -> None:
    row = spot_row()
    record = cluster(row)
    record.account_uptime(ClusterStatus.UP, at(0))
    record.account_uptime(ClusterStatus.UP, at(10))  # a refresh: the clock keeps running
    record.account_uptime(ClusterStatus.STOPPED, at(30))
    stopped = cluster_line(record, at(90))
    assert stopped.hours == pytest.approx(0.5)
    record.account_uptime(ClusterStatus.UP, at(120))
    live = cluster_line(record, at(150))  # 30 min before the stop, 30 since the start
    assert live.hours == pytest.approx(1.0)
    assert live.price_per_hour == pytest.approx(row.price * 2)
    assert live.cost == pytest.approx(row.price * 2 * 1.0)
    record.account_uptime(ClusterStatus.TERMINATED, at(180))
    gone = cluster_line(record, at(600))  # frozen at the teardown
    assert gone.hours == pytest.approx(1.5) and gone.cost == pytest.approx(row.price * 3)


def test_a_cluster_never_up_costs_nothing() -> None:
    record = cluster(spot_row())
    record.account_uptime(ClusterStatus.INIT, at(0))
    record.account_uptime(ClusterStatus.TERMINATED, at(5))
    line = cluster_line(record, at(10))
    assert line.hours == 0 and line.cost == 0


def test_a_managed_job_sums_its_clusters_each_priced_where_it_ran() -> None:
    first, second = spot_row("aws"), spot_row("gcp")
    assert first.spot_price is not None and second.spot_price is not None
    state = new_state(7, "train", [Task(run="python train.py")], T0)
    state.status, state.started_at = ManagedJobStatus.RUNNING, T0
    run = state.runs[0]
    run.usage.up(at(0))  # preempted after 60 min, recovered on GCP
    run.usage.gone(placement_of(first, spot=True), 1, "1x aws", at(60))
    run.usage.up(at(70))
    run.placement, run.resources = placement_of(second, spot=True), "1x gcp"
    run.info = ClusterInfo(cloud="gcp", region=second.region, nodes=[
        NodeInfo(instance_id="n0", internal_ip="10.0.0.2", is_head=True)])
    line = job_line(state, at(100))
    assert line.name == "job 7 (train)" and line.kind == "managed job"
    assert line.hours == pytest.approx(1.5)
    assert line.cost == pytest.approx(first.spot_price + second.spot_price * 0.5)
    assert line.price_per_hour == second.spot_price and line.resources == "1x gcp"


def test_the_report_totals_what_has_a_price_and_counts_what_has_not() -> None:
    row = spot_row()
    priced, unknown = cluster(row, nodes=1), cluster(row)
    unknown.name = "odd"
    assert unknown.placement is not None
    unknown.placement.instance_type = "no-such.type"
    for record in (priced, unknown):
        record.usage = UsageClock(up_since=at(0))
    result = report([cluster_line(unknown, at(60)), cluster_line(priced, at(60))])
    assert result.total == pytest.approx(row.price) and result.unpriced == 1
    assert [line.name for line in result.lines] == ["train", "odd"]  # most expensive first
    assert result.lines[1].cost is None and result.lines[1].hours == pytest.approx(1.0)
