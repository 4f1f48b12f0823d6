"""The launch semaphore's state as its continue-as-new input carries it: small enough for
10,000 managed jobs' slots, and every run's input still read, whichever form it has."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from orch.semaphore import (
    FINISHED_REQUESTS_KEPT,
    AcquireRequest,
    LaunchSemaphoreInput,
    PermitHolder,
    PermitKind,
    PermitPool,
    SemaphoreState,
)

SERVER_PAYLOAD_LIMIT = 2 * 1024 * 1024  # the server refuses a larger payload


def _request(kind: PermitKind, holder: str) -> AcquireRequest:
    return AcquireRequest(kind=kind, holder_id=holder, holder_first_run_id=str(uuid.uuid4()),
                          request_id=str(uuid.uuid4()))


def _state(jobs: int, launch_waiters: int) -> LaunchSemaphoreInput:
    granted = datetime(2026, 12, 5, 7, 6, 17, 481880, tzinfo=UTC)
    slots = [PermitHolder(request=_request("job", f"job/{i}"), granted_at=granted)
             for i in range(jobs)]
    waiting = [_request("launch", f"job/{i}/launch-0-1/failover") for i in range(launch_waiters)]
    return LaunchSemaphoreInput(state=SemaphoreState(
        job=PermitPool(holders=slots), launch=PermitPool(waiters=waiting),
        finished_request_ids=[str(uuid.uuid4()) for _ in range(FINISHED_REQUESTS_KEPT)]))


def test_ten_thousand_job_slots_fit_in_one_payload_and_read_back_whole() -> None:
    state = _state(10_000, 2_000)
    data = state.model_dump_json()
    assert len(data) < 0.75 * SERVER_PAYLOAD_LIMIT  # 1.4 MB; with named fields, 2.4 MB
    assert LaunchSemaphoreInput.model_validate_json(data) == state
    holder = json.loads(data)["state"]["job"]["holders"][0]
    assert holder[:2] == ["job", "job/0"] and holder[4] == 1796454377481880


def test_an_input_written_with_named_fields_is_still_read() -> None:
    state = _state(3, 2)
    pools = {kind: {"holders": [json.loads(h.model_dump_json()) for h in pool.holders],
                    "waiters": [json.loads(w.model_dump_json()) for w in pool.waiters]}
             for kind, pool in (("job", state.state.job), ("launch", state.state.launch))}
    recorded = json.dumps({"state": {**pools, "finished_request_ids": []}})
    read = LaunchSemaphoreInput.model_validate_json(recorded)
    assert read.state.job.holders == state.state.job.holders
    assert read.state.launch.waiters == state.state.launch.waiters
