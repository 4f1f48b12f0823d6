"""How a failed activity is put to the user: a Temporal timeout is named for what it
means, not by the SDK's own words."""

from __future__ import annotations

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from orch.clouds.errors import BlockScope
from workflows.options import error_message, failure_kind, failure_scope


def _activity_failure(activity: str, cause: BaseException) -> ActivityError:
    """What the SDK raises in a workflow for a failed activity: an ActivityError whose
    cause is the failure (as converted from the server's failure chain)."""
    error = ActivityError("Activity task failed", scheduled_event_id=5, started_event_id=6,
                          identity="1@worker", activity_type=activity, activity_id="3",
                          retry_state=RetryState.TIMEOUT)
    error.__cause__ = cause
    return error


def test_a_heartbeat_timeout_is_named_with_its_activity() -> None:
    failure = _activity_failure("run_instances", TimeoutError(
        "activity Heartbeat timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]))
    assert error_message(failure) == (
        "heartbeat timeout: the worker stopped answering during run_instances")
    assert failure_kind(failure) == "HeartbeatTimeout"


def test_a_start_to_close_timeout_says_the_call_ran_too_long() -> None:
    failure = _activity_failure("wait_running", TimeoutError(
        "activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE,
        last_heartbeat_details=[]))
    assert error_message(failure) == "timeout: wait_running ran past its time limit"
    assert failure_kind(failure) == "Timeout"


def test_an_application_error_keeps_its_own_message_and_type() -> None:
    failure = _activity_failure("run_instances", ApplicationError(
        "no capacity", type="CapacityError"))
    assert error_message(failure) == "no capacity"
    assert failure_kind(failure) == "CapacityError"


def test_a_heartbeat_timeout_blocks_nothing_and_a_provider_error_its_own_scope() -> None:
    lost_worker = _activity_failure("run_instances", TimeoutError(
        "activity Heartbeat timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]))
    assert failure_scope(lost_worker) == BlockScope.NONE
    quota = _activity_failure("check_quota", ApplicationError(
        "quota reached", {"scope": "region", "code": "VcpuLimitExceeded"}, type="QuotaError"))
    assert failure_scope(quota) == BlockScope.REGION
    # A call that ran past its time limit, or an error that names no scope: the zone.
    hung = _activity_failure("wait_running", TimeoutError(
        "activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE,
        last_heartbeat_details=[]))
    assert failure_scope(hung) == BlockScope.ZONE
    assert failure_scope(_activity_failure("run_instances", ApplicationError("boom"))) == (
        BlockScope.ZONE)
