"""The records `orch cost-report` prices, read from Temporal.

Live clusters: each ClusterWorkflow's ``record`` query. Torn-down clusters: a
ClusterWorkflow ends (Completed) when its cluster is TERMINATED, with its record as the
result, so each closed run of ``cluster/<name>`` the server still keeps (for its
namespace retention: 24 h on the embedded dev server) gives the cluster's whole usage.
Workflows ended another way (terminated by an operator) left no record and are not
counted. Managed jobs: each job's state (query, or result once ended).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TypeVar

from orch.client import Client
from orch.client.managed_jobs import ManagedJobs
from orch.cost import CostReport, cluster_line, job_line, report
from orch.managed_jobs import ManagedJobState
from orch.records import CLUSTER_WORKFLOW, ClusterRecord

CONCURRENT_READS = 16  # queries and result fetches in flight at once
T = TypeVar("T")


async def _bounded(reads: list[Awaitable[T]]) -> list[T]:
    gate = asyncio.Semaphore(CONCURRENT_READS)

    async def one(read: Awaitable[T]) -> T:
        async with gate:
            return await read

    return list(await asyncio.gather(*(one(r) for r in reads)))


async def live_records(client: Client) -> list[ClusterRecord]:
    names = [c.name for c in await client.status() if not c.job_id]
    records = await _bounded([client.record(name) for name in names])
    return [r for r in records if r is not None]


async def closed_records(client: Client) -> list[ClusterRecord]:
    """The final record of every torn-down cluster the server still remembers."""
    query = f"WorkflowType = '{CLUSTER_WORKFLOW}' AND ExecutionStatus = 'Completed'"
    reads: list[Awaitable[ClusterRecord]] = []
    async for execution in client.temporal.list_workflows(query):
        handle = client.temporal.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=ClusterRecord)
        reads.append(handle.result())
    return await _bounded(reads)


async def job_states(client: Client) -> list[ManagedJobState]:
    """Every managed job that had a cluster (one that never got one cost nothing)."""
    jobs = ManagedJobs(client)
    summaries = await jobs.queue()
    states = await _bounded([jobs.state(s.id) for s in summaries])
    return [s for s in states if any(r.usage.done or r.usage.up_since for r in s.runs)]


async def cost_report(client: Client, now: datetime | None = None) -> CostReport:
    now = now or datetime.now(UTC)
    live, closed, jobs = await asyncio.gather(
        live_records(client), closed_records(client), job_states(client))
    return report([cluster_line(r, now) for r in [*live, *closed]]
                  + [job_line(s, now) for s in jobs])
