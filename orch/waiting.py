"""Waiting on a cloud, in one place.

Providers expose only short, idempotent calls; a provider's ``check_instances`` is one
describe that says whether the cluster has reached a state, what it saw, or raises when
it never will. :func:`wait_until` turns such a check into a wait: it polls with backoff
(1 s, 2 s, 4 s … up to 15 s: a boot is seen soon, a long Azure create costs few calls),
reports its :class:`WaitProgress` after every poll, and gives up with a TransientError
once ``timeout_s`` has passed *since the wait first started*.

That last point is what makes a wait resumable: the progress carries the wall-clock time
the first attempt started, so an attempt retried after a worker crash passes the last
progress back in and keeps the original deadline instead of starting a fresh one (the
activity layer stores the progress in its heartbeat details). Nothing here knows about
Temporal.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from orch.clouds.base import InstanceStatus, Provider, StateCheck
from orch.clouds.errors import TransientError

FIRST_GAP_S = 1.0
MAX_GAP_S = 15.0


class WaitProgress(BaseModel):
    """What a wait waits for, since when (epoch seconds), how many polls so far, and the
    last state seen: the heartbeat details of a waiting activity."""

    model_config = ConfigDict(frozen=True)

    what: str
    since: float
    polls: int = 0
    last_seen: str = ""


def resumed(what: str, earlier: object, now: float) -> WaitProgress:
    """The progress to start from: an earlier attempt's, when it waited for the same
    thing (heartbeat details come back as plain dicts), else a fresh one."""
    if isinstance(earlier, dict):
        try:
            progress = WaitProgress.model_validate(earlier)
        except ValueError:
            progress = None
        if progress is not None and progress.what == what:
            return progress
    return WaitProgress(what=what, since=now)


def wait_until(
    check: Callable[[], StateCheck],
    progress: WaitProgress,
    timeout_s: float,
    report: Callable[[WaitProgress], None],
    *,
    first_gap_s: float = FIRST_GAP_S,
    max_gap_s: float = MAX_GAP_S,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
) -> WaitProgress:
    """Poll ``check`` until it is done; return the final progress. Errors raised by the
    check (an instance lost while booting, a failed operation) pass through."""
    gap = first_gap_s
    while True:
        seen = check()
        progress = progress.model_copy(update={"polls": progress.polls + 1,
                                               "last_seen": seen.seen})
        report(progress)
        if seen.done:
            return progress
        if now() - progress.since >= timeout_s:
            raise TransientError(
                f"gave up after {timeout_s:g} s waiting for {progress.what}: "
                f"last seen {seen.seen or 'nothing'}", code="WaitTimeout")
        sleep(gap)
        gap = min(gap * 2, max_gap_s)


def state_check(provider: Provider, region: str, cluster_name: str,
                state: InstanceStatus) -> Callable[[], StateCheck]:
    return lambda: provider.check_instances(region, cluster_name, state)
