"""Statuses of clusters and jobs, as SkyPilot names them."""

from __future__ import annotations

from enum import StrEnum


class ClusterStatus(StrEnum):
    INIT = "INIT"  # being provisioned or set up, or in an unknown state after a failure
    UP = "UP"
    STOPPED = "STOPPED"
    TERMINATED = "TERMINATED"  # the workflow's last state; never listed by `orch status`


class JobStatus(StrEnum):
    PENDING = "PENDING"  # submitted, waiting for its placement group
    SETTING_UP = "SETTING_UP"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_DRIVER = "FAILED_DRIVER"  # the driver process died without recording an end
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = {
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.FAILED_SETUP,
    JobStatus.FAILED_DRIVER,
    JobStatus.CANCELLED,
}
