"""The two activities that differ on the benchmarks' simulated cloud (``orch.clouds.simulated``):
planning, since the cloud is in no catalog, and runtime setup, since its heads have no
venv to build (their interpreter is ``bin/python`` of the simulated cloud). Every other
activity, the managed-job watch included, is orch's own. A worker registers these in place
of ``activities/plan.py``'s and ``activities/runtime.py``'s only where the simulated cloud
is enabled (``workers/registry.py``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import typed_errors
from activities.runtime import on_every_node
from orch.clouds.base import NodeInfo
from orch.clouds.simulated import SIMULATED, SimulatedProvider
from orch.contracts.plan import PLAN_CANDIDATES, PlanRequest
from orch.contracts.runtime import SETUP_RUNTIME, NodesRequest
from orch.failover_rules import Candidate
from orch.runtime.runner import runner_for


@activity.defn(name=PLAN_CANDIDATES)
def plan_candidates(request: PlanRequest) -> list[Candidate]:
    """Every zone of the simulated cloud not blocked, region by region in the order of its
    configuration (all at one price: the order is the preference)."""
    config = SimulatedProvider().config
    task = request.task
    candidates = []
    for region, zones in config.regions.items():
        if request.placement is not None and request.placement.region != region:
            continue
        usable = [z for z in zones.zones
                  if not request.blocklist.blocks(SIMULATED, region, z, None, False)]
        if usable:
            candidates.append(Candidate(
                cloud=SIMULATED, region=region, zones=usable, num_nodes=task.num_nodes,
                cpus=config.cpus, memory_gb=config.memory_gb,
                price_per_node=config.price_per_node,
                price_per_hour=config.price_per_node * task.num_nodes))
    if not candidates:
        raise ApplicationError("every simulated zone is blocked", type="NoCandidatesError",
                               non_retryable=True)
    return candidates


@activity.defn(name=SETUP_RUNTIME)
@typed_errors
def setup_runtime(request: NodesRequest) -> list[str]:
    """One command on each node, as a real node's probe is (a cheap one: every simulated
    node shares this machine); returns the nodes' interpreters."""

    def check(rank: int, node: NodeInfo) -> str:
        with runner_for(node) as runner:
            runner.check(f"test -x {shlex.quote(node.python)}", timeout=120)
        return node.python

    return on_every_node(request.info.nodes, check)


OVERRIDES: list[Callable[..., Any]] = [plan_candidates, setup_runtime]
