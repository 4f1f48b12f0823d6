"""The provider tests' waits: orch's own waiter (``orch.waiting``, as the activities use
it), with gaps short enough for moto and the fakes (their "pending for N polls" counts
polls, not seconds), and no reporting."""

from __future__ import annotations

import time
from collections.abc import Callable

from orch.clouds.base import (
    InstanceStatus,
    Operation,
    Provider,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.waiting import StartInstances, WaitProgress, after_operations, state_check, wait_until


def _wait(what: str, check: Callable[[], StateCheck], timeout_s: float) -> WaitProgress:
    return wait_until(check, WaitProgress(what=what, since=time.time()), timeout_s,
                      lambda _: None, min_gap_s=0.01, max_gap_s=0.2)


def launch(provider: Provider, config: ProvisionConfig, timeout_s: float = 60.0
           ) -> ProvisionRecord:
    """``run_instances`` until it has started everything, as the activity calls it."""
    start = StartInstances(provider, config)
    _wait(f"{config.cluster_name} started", start, timeout_s)
    return start.record


def settle(provider: Provider, region: str, cluster_name: str,
           operations: list[Operation], timeout_s: float = 60.0) -> None:
    """Until ``operations`` are over; raises the error of a failed one."""
    _wait(f"{cluster_name} operations", after_operations(
        provider, region, cluster_name, operations, lambda: StateCheck(done=True)), timeout_s)


def wait_instances(provider: Provider, region: str, cluster_name: str, state: InstanceStatus,
                   timeout_s: float = 60.0, operations: list[Operation] | None = None
                   ) -> WaitProgress:
    """Until every instance is in ``state``, once ``operations`` are over."""
    return _wait(f"{cluster_name} {state} in {region}", after_operations(
        provider, region, cluster_name, operations or [],
        state_check(provider, region, cluster_name, state)), timeout_s)


def provisioned(provider: Provider, config: ProvisionConfig, timeout_s: float = 60.0
                ) -> ProvisionRecord:
    """What a launch's ``run_instances`` and the wait that follows it do, up to the
    instances' states: started, and every operation over (a failed one raises)."""
    record = launch(provider, config, timeout_s)
    settle(provider, config.region, config.cluster_name, record.operations, timeout_s)
    return record
