"""orch.waiting: the one waiter every cloud wait goes through, on a clock of its own."""

from __future__ import annotations

import pytest

from orch.clouds.base import Operation, ProvisionConfig, ProvisionRecord, StateCheck
from orch.clouds.errors import CapacityError, TransientError
from orch.waiting import (
    MAX_GAP_S,
    MIN_GAP_S,
    StartInstances,
    WaitProgress,
    after_operations,
    resumed,
    wait_until,
)


class Clock:
    """Time that moves only when the waiter sleeps, or a check says it took long."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def checks(*seen: str, done_after: int | None = None):
    """A check that has seen ``seen[i]`` at its i-th call; done from ``done_after`` on."""
    calls: list[int] = []

    def check() -> StateCheck:
        calls.append(1)
        n = len(calls)
        return StateCheck(done=done_after is not None and n >= done_after,
                          seen=seen[min(n, len(seen)) - 1])

    return check, calls


def test_polls_with_gaps_that_grow_with_the_time_waited_up_to_the_cap() -> None:
    clock = Clock()
    reports: list[WaitProgress] = []
    check, calls = checks("i-1=pending", done_after=60)
    start = WaitProgress(what="c RUNNING in r", since=clock.now)

    final = wait_until(check, start, 900, reports.append, sleep=clock.sleep,
                       now=lambda: clock.now)

    assert len(calls) == 60 and final.polls == 60
    assert [r.polls for r in reports] == list(range(1, 61))
    assert reports[-1].last_seen == "i-1=pending"
    # Half a second apart at first, then a tenth of the time waited, then the cap.
    assert clock.sleeps[:6] == [MIN_GAP_S] * 6
    waited = 0.0
    for gap in clock.sleeps:
        assert gap == pytest.approx(min(max(waited / 10, MIN_GAP_S), MAX_GAP_S))
        waited += gap
    assert clock.sleeps[-1] == MAX_GAP_S
    assert MIN_GAP_S < clock.sleeps[20] < MAX_GAP_S


def test_a_boot_is_seen_within_a_tenth_of_its_length_after_it_ends() -> None:
    for boot_s in (5.0, 20.0, 60.0):
        clock = Clock()
        booted_at = clock.now + boot_s
        wait_until(lambda: StateCheck(done=clock.now >= booted_at, seen="i-1"),  # noqa: B023
                   WaitProgress(what="c RUNNING in r", since=clock.now), 900, lambda _: None,
                   sleep=clock.sleep, now=lambda: clock.now)  # noqa: B023
        assert clock.now - booted_at <= boot_s / 10


def test_gives_up_after_the_timeout_counted_from_the_first_attempt() -> None:
    clock = Clock()
    check, _ = checks("i-1=pending", "i-1=stopping")
    # An earlier attempt started 890 s ago and polled 40 times before its worker died.
    earlier = WaitProgress(what="c RUNNING in r", since=clock.now - 890, polls=40).model_dump()
    progress = resumed("c RUNNING in r", earlier, clock.now)
    assert progress.polls == 40

    with pytest.raises(TransientError) as raised:
        wait_until(check, progress, 900, lambda _: None, sleep=clock.sleep,
                   now=lambda: clock.now)

    assert raised.value.code == "WaitTimeout"
    assert raised.value.message == (
        "gave up after 900 s waiting for c RUNNING in r: last seen i-1=stopping")
    # Polls at 890 and 905 s into the wait (the gap is capped): the first attempt's deadline,
    # kept.
    assert clock.sleeps == [MAX_GAP_S]


def test_an_earlier_attempt_that_waited_for_something_else_is_not_resumed() -> None:
    other = WaitProgress(what="c STOPPED in r", since=5.0, polls=3).model_dump()
    assert resumed("c RUNNING in r", other, 100.0) == WaitProgress(what="c RUNNING in r",
                                                                   since=100.0)
    assert resumed("c RUNNING in r", "in run_instances", 100.0).since == 100.0
    assert resumed("c RUNNING in r", {"what": 3}, 100.0).polls == 0


def test_an_error_from_the_check_passes_through_at_once() -> None:
    clock = Clock()

    def check() -> StateCheck:
        raise CapacityError("instance i-1 was reclaimed while booting")

    with pytest.raises(CapacityError):
        wait_until(check, WaitProgress(what="x", since=clock.now), 900, lambda _: None,
                   sleep=clock.sleep, now=lambda: clock.now)
    assert clock.sleeps == []


class Steps:
    """A provider's answers, one per call, for the waiter to go through (the parts of a
    provider that :func:`after_operations` and :class:`StartInstances` call)."""

    def __init__(self, operations: list[StateCheck], records: list[ProvisionRecord]) -> None:
        self.operations, self.records = operations, records
        self.calls: list[str] = []

    def check_operations(self, region: str, cluster_name: str,
                         operations: list[Operation]) -> StateCheck:
        self.calls.append(f"operations {[str(op) for op in operations]}")
        return self.operations.pop(0)

    def run_instances(self, config: ProvisionConfig) -> ProvisionRecord:
        self.calls.append("run_instances")
        return self.records.pop(0)


INSERT = Operation(kind="insert", name="operation-1", target="c-head", zone="z-a")


def test_operations_end_before_the_instances_are_looked_at() -> None:
    clock = Clock()
    provider = Steps([StateCheck(done=False, seen="insert c-head RUNNING"),
                      StateCheck(done=True)], [])
    looks: list[int] = []

    def instances() -> StateCheck:
        looks.append(len(provider.calls))
        return StateCheck(done=True, seen="c-head=RUNNING")

    check = after_operations(provider, "r", "c", [INSERT], instances)  # type: ignore[arg-type]
    reports: list[WaitProgress] = []
    final = wait_until(check, WaitProgress(what="c RUNNING in r", since=clock.now), 900,
                       reports.append, sleep=clock.sleep, now=lambda: clock.now)

    assert provider.calls == ["operations ['insert c-head']"] * 2
    assert looks == [2]  # in the poll that saw the operations end
    assert [r.last_seen for r in reports] == ["insert c-head RUNNING", "c-head=RUNNING"]
    assert final.polls == 2


def test_without_operations_only_the_instances_are_looked_at() -> None:
    provider = Steps([], [])
    check = after_operations(provider, "r", "c", [],  # type: ignore[arg-type]
                             lambda: StateCheck(done=True, seen="c-head=RUNNING"))
    assert check().seen == "c-head=RUNNING" and provider.calls == []


def test_run_instances_is_called_again_while_it_waits_and_its_calls_add_up() -> None:
    clock = Clock()
    record = ProvisionRecord(cloud="gcp", cluster_name="c", region="r", head_instance_id="c-head")
    provider = Steps([], [
        record.model_copy(update={"resumed_instance_ids": ["c-head"],
                                  "waiting_for": "c-worker-1=STOPPING"}),
        record.model_copy(update={"resumed_instance_ids": ["c-worker-1"],
                                  "created_instance_ids": ["c-worker-2"],
                                  "operations": [INSERT]}),
    ])
    config = ProvisionConfig(cluster_name="c", num_nodes=3, region="r")
    start = StartInstances(provider, config)  # type: ignore[arg-type]

    final = wait_until(start, WaitProgress(what="c started in r", since=clock.now), 300,
                       lambda _: None, sleep=clock.sleep, now=lambda: clock.now)

    assert provider.calls == ["run_instances"] * 2 and clock.sleeps == [MIN_GAP_S]
    assert final.polls == 2
    assert start.record.resumed_instance_ids == ["c-head", "c-worker-1"]
    assert start.record.created_instance_ids == ["c-worker-2"]
    assert start.record.operations == [INSERT] and start.record.waiting_for == ""
