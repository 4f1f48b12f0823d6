"""Timeouts and retry policies for orch's activities, in one place.

How long each step may take on a real cloud, and how soon a dead worker is noticed:

=====================  ==============  =========  =====================================
options                start-to-close  heartbeat  for
=====================  ==============  =========  =====================================
``PROVIDER_CALL``      10 min          20 s       one provider call that starts work
                                                  and returns: quota, RunInstances
                                                  (GCP/Azure: creates and starts are
                                                  started, not awaited; the call waits
                                                  only for what they need first, 5 min
                                                  at most: instances still stopping, an
                                                  Azure VM's network; an AWS resume
                                                  still waits out ``stopping``),
                                                  describe, stop, terminate (started,
                                                  not awaited), ports (a GCP firewall
                                                  operation, 2 min at most). Heartbeats
                                                  while the call blocks.
``LONG_CALL``          6 h             20 s       waits, each with a bound of its own
                                                  counted from its first attempt: for
                                                  RUNNING 15 min (the create and start
                                                  operations first), until stopped or
                                                  gone 30 min (the stop and delete
                                                  operations first; an Azure resource
                                                  group can take more than 10); node
                                                  setup, pip, Ray, file sync, the
                                                  user's setup.
``CLOUD_CALL``         2 min           none       short calls that are not provider calls:
                                                  planning, job submission.
``BEST_EFFORT``        90 s            20 s       checks whose failure is tolerated.
``WATCH_CALL``         365 d           5 min      a job's watch: as long as the job runs
                                                  (see below).
=====================  ==============  =========  =====================================

A worker killed in any provider call or wait is noticed within ``HEARTBEAT`` (20 s) and
the call retried on another worker; waits resume from their heartbeat details with the
deadline they started with (``orch/waiting.py``), and the operations they wait for are in
their input (``orch/contracts/provision.py``), so nothing is started twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeout

from orch.clouds.errors import BlockScope

HEARTBEAT = timedelta(seconds=20)

# Error types that retrying the same call cannot fix (activities/errors.py sets
# non_retryable on them too; naming them here also covers errors raised by other code).
NOT_RETRYABLE = [
    "CapacityError",
    "QuotaError",
    "AuthError",
    "InvalidConfigError",
    "SetupError",
    "SpecError",
    "NoCandidatesError",
]

CLOUD_CALL: dict[str, Any] = {
    "start_to_close_timeout": timedelta(minutes=2),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=6,
        non_retryable_error_types=NOT_RETRYABLE,
    ),
}

PROVIDER_CALL: dict[str, Any] = {
    **CLOUD_CALL,
    "start_to_close_timeout": timedelta(minutes=10),
    "heartbeat_timeout": HEARTBEAT,
}

LONG_CALL: dict[str, Any] = {
    "start_to_close_timeout": timedelta(hours=6),
    "heartbeat_timeout": HEARTBEAT,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=5,
        non_retryable_error_types=NOT_RETRYABLE,
    ),
}

BEST_EFFORT: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=90),
    "heartbeat_timeout": HEARTBEAT,
    "retry_policy": RetryPolicy(maximum_attempts=2, initial_interval=timedelta(seconds=1)),
}


# The watch lasts as long as the job; heartbeats notice a dead worker, and retries (with
# no limit) resume it from its heartbeat details on another. Every running job heartbeats
# (the SDK sends one RPC per 0.8 x the timeout), a steady cost of the server: measured at
# 2,000 jobs on the embedded dev server (bench/watch_heartbeats.py, README "Performance"),
# a 15 s timeout costs the server 0.7 core and the worker 0.26, a minute a quarter of
# that. Five minutes: 8 RPCs a second at 2,000 jobs. A worker restarted on the same host
# takes its dead predecessor's watches over at once (workers/watch_takeover.py), so only
# a worker that never comes back makes a job's end wait for this timeout.
WATCH_HEARTBEAT_TIMEOUT = timedelta(minutes=5)
WATCH_CALL: dict[str, Any] = {
    "start_to_close_timeout": timedelta(days=365),
    "heartbeat_timeout": WATCH_HEARTBEAT_TIMEOUT,
    "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=1),
                                maximum_interval=timedelta(minutes=1)),
}


def error_type(error: BaseException) -> str:
    """The ApplicationError type behind an activity or child workflow failure, or ''."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ApplicationError):
            return cause.type or ""
        cause = cause.__cause__
    return ""


def error_details(error: BaseException) -> dict[str, Any]:
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ApplicationError):
            details = cause.details[0] if cause.details else {}
            return details if isinstance(details, dict) else {}
        cause = cause.__cause__
    return {}


_TIMEOUTS = {  # what each Temporal timeout means to the user
    TimeoutType.HEARTBEAT: ("heartbeat timeout", "the worker stopped answering during {}"),
    TimeoutType.START_TO_CLOSE: ("timeout", "{} ran past its time limit"),
    TimeoutType.SCHEDULE_TO_START: ("timeout", "no worker picked up {} in time"),
    TimeoutType.SCHEDULE_TO_CLOSE: ("timeout", "{} ran past its time limit, retries included"),
}


def _timeout(error: BaseException) -> tuple[str, str] | None:
    """The kind (``HeartbeatTimeout``) and words of an activity's timeout, None if it is
    not one: ``heartbeat timeout: the worker stopped answering during run_instances``."""
    activity_name = "the activity"
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ActivityError):
            activity_name = cause.activity_type or activity_name
        if isinstance(cause, TemporalTimeout) and cause.type in _TIMEOUTS:
            name, words = _TIMEOUTS[cause.type]
            return name.title().replace(" ", ""), f"{name}: {words.format(activity_name)}"
        cause = cause.__cause__
    return None


def failure_kind(error: BaseException) -> str:
    """The error's type for the user: the ApplicationError's, else the timeout's."""
    timeout = _timeout(error)
    return error_type(error) or (timeout[0] if timeout else "")


def failure_scope(error: BaseException) -> BlockScope:
    """What a failed cloud step blocks: the scope its provider error names, else the zone.
    A heartbeat timeout names none but blocks nothing: it says the worker running the
    step was lost (killed, or stalled past ``HEARTBEAT``), not that the place failed, so
    the place is tried again, and counted, as any unblocked failure is."""
    if (timeout := _timeout(error)) is not None and timeout[0] == "HeartbeatTimeout":
        return BlockScope.NONE
    return BlockScope(error_details(error).get("scope", BlockScope.ZONE))


def error_message(error: BaseException) -> str:
    """The innermost message: what actually went wrong, not the wrapping layers; a
    timeout is named as such, not by Temporal's own words."""
    timeout = _timeout(error)
    if timeout is not None:
        return timeout[1]
    cause: BaseException = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return getattr(cause, "message", None) or str(cause)
