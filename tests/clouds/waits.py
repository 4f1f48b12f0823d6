"""The provider tests' wait: orch's own waiter, with gaps short enough for moto and the
fakes (their "pending for N polls" counts polls, not seconds), and no reporting."""

from __future__ import annotations

import time

from orch.clouds.base import InstanceStatus, Provider
from orch.waiting import WaitProgress, state_check, wait_until


def wait_instances(provider: Provider, region: str, cluster_name: str, state: InstanceStatus,
                   timeout_s: float = 60.0) -> WaitProgress:
    progress = WaitProgress(what=f"{cluster_name} {state} in {region}", since=time.time())
    return wait_until(state_check(provider, region, cluster_name, state), progress,
                      timeout_s, lambda _: None, first_gap_s=0.01, max_gap_s=0.2)
