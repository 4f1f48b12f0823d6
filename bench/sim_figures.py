"""Figures the simulated-cloud benchmarks read from the cloud's call log and from the
dev server (``bench/managed_jobs_scale.py``, ``launch_overhead.py``, ``failover_hops.py``)."""

from __future__ import annotations

import re
import statistics
import urllib.request
from collections import defaultdict, deque

from pydantic import BaseModel

Call = tuple[float, str, str, float]  # (when it returned, method, cluster, latency)


class Interval(BaseModel):
    """One launch's provisioning on the cloud: its first call began at ``start``, its
    get_cluster_info returned at ``end``; ``cloud_s`` is the latency it was made to wait."""

    cluster: str
    start: float
    end: float
    cloud_s: float


def provisioning(calls: list[Call]) -> list[Interval]:
    """Each cluster's first provisioning round, from check_quota to get_cluster_info."""
    by_cluster: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_cluster[call[2]].append(call)
    intervals = []
    for cluster, made in by_cluster.items():
        starts = [at - latency for at, method, _, latency in made if method == "check_quota"]
        ends = [at for at, method, _, _ in made if method == "get_cluster_info"]
        if starts and ends:
            start, end = starts[0], ends[0]
            spent = sum(latency for at, _, _, latency in made if start < at <= end)
            intervals.append(Interval(cluster=cluster, start=start, end=end, cloud_s=spent))
    return intervals


def peak_overlap(intervals: list[Interval]) -> int:
    """The most provisioning rounds under way at one moment."""
    moments = sorted([(i.start, 1) for i in intervals] + [(i.end, -1) for i in intervals])
    peak = now = 0
    for _, change in moments:
        now += change
        peak = max(peak, now)
    return peak


def permit_waits(intervals: list[Interval], permits: int) -> list[float]:
    """From each permit given back while all were held (so launches were queued for one)
    to the first cloud call of the next launch to start: how long a free permit stays
    unused. Empty when the permits were never all held."""
    events = sorted([(i.end, 0) for i in intervals] + [(i.start, 1) for i in intervals])
    in_flight, freed, waits = 0, deque[float](), []
    for moment, is_start in events:
        if is_start:
            if freed:
                waits.append(moment - freed.popleft())
            in_flight += 1
        else:
            if in_flight >= permits:
                freed.append(moment)
            in_flight -= 1
    return waits


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


_ACTION = re.compile(r'^action\{[^}]*namespace="default"[^}]*\} ([0-9.e+]+)$', re.M)


_PERSISTENCE = re.compile(r'^persistence_requests\{[^}]*operation="([^"]+)"[^}]*\} ([0-9.e+]+)$',
                          re.M)


def _metrics(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        return r.read().decode()


def server_actions(metrics_port: int) -> float:
    """The dev server's count of Temporal actions in orch's namespace so far."""
    return sum(float(value) for value in _ACTION.findall(_metrics(metrics_port)))


def persistence_requests(metrics_port: int) -> dict[str, float]:
    """The dev server's requests to its database so far, by operation (its writes of a
    workflow's state are ``UpdateWorkflowExecution``)."""
    counts: dict[str, float] = {}
    for operation, value in _PERSISTENCE.findall(_metrics(metrics_port)):
        counts[operation] = counts.get(operation, 0.0) + float(value)
    return counts
