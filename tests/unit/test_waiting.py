"""orch.waiting: the one waiter every cloud wait goes through, on a clock of its own."""

from __future__ import annotations

import pytest

from orch.clouds.base import StateCheck
from orch.clouds.errors import CapacityError, TransientError
from orch.waiting import MAX_GAP_S, WaitProgress, resumed, wait_until


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


def test_polls_with_doubling_gaps_up_to_the_cap_and_reports_every_poll() -> None:
    clock = Clock()
    reports: list[WaitProgress] = []
    check, calls = checks("i-1=pending", done_after=8)
    start = WaitProgress(what="c RUNNING in r", since=clock.now)

    final = wait_until(check, start, 900, reports.append, sleep=clock.sleep,
                       now=lambda: clock.now)

    assert clock.sleeps == [1, 2, 4, 8, MAX_GAP_S, MAX_GAP_S, MAX_GAP_S]
    assert len(calls) == 8 and final.polls == 8
    assert [r.polls for r in reports] == list(range(1, 9))
    assert reports[-1].last_seen == "i-1=pending"


def test_gives_up_after_the_timeout_counted_from_the_first_attempt() -> None:
    clock = Clock()
    check, _ = checks("i-1=pending", "i-1=pending", "i-1=stopping")
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
    # Polls at 890, 891, 893, 897 and 905 s into the wait: the first attempt's deadline, kept.
    assert clock.sleeps == [1, 2, 4, 8]


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
