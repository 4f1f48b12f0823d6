"""The provider tests' wait: orch's own waiter, with gaps short enough for moto and the
fakes (their "pending for N polls" counts polls, not seconds)."""

from __future__ import annotations

from orch.clouds.base import InstanceStatus, Provider
from orch.waiting import WaitProgress, wait_for_state


def wait_instances(provider: Provider, region: str, cluster_name: str, state: InstanceStatus,
                   timeout_s: float = 60.0) -> WaitProgress:
    return wait_for_state(provider, region, cluster_name, state, timeout_s,
                          first_gap_s=0.01, max_gap_s=0.2)
