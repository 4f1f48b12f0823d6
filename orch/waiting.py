"""Waiting on a cloud, in one place.

Providers expose only short, idempotent calls; a provider's ``check_instances`` is one
describe that says whether the cluster has reached a state, what it saw, or raises when
it never will. :func:`wait_until` turns such a check into a wait: it polls with a gap that
grows with the time waited so far (a tenth of it, at least 0.5 s and at most 15 s: a
5 s boot is seen within half a second of it, a 60 s one within 6 s, and a long Azure
create costs few calls), reports its :class:`WaitProgress` after every poll, and gives up with a
TransientError once ``timeout_s`` has passed *since the wait first started*.

That last point is what makes a wait resumable: the progress carries the wall-clock time
the first attempt started, so an attempt retried after a worker crash passes the last
progress back in and keeps the original deadline instead of starting a fresh one (the
activity layer stores the progress in its heartbeat details). Nothing here knows about
Temporal.

How a wait learns about the cloud's operations in flight: the call that started them
returns them (:class:`orch.clouds.base.Operation`: a GCP Operation's name and zone; for
Azure the resource whose provisioning state carries its operation's outcome, as ARM
keeps a failed VM create's code in the VM's instance view, or the address of ARM's record
of a resource group's delete), the workflow passes them on
in the wait's request, and :func:`after_operations` looks at them before anything else.
The wait's input is all it needs, so a retried attempt (another worker, after a crash)
knows them too, and a failed operation surfaces with its own code (a GCP insert out of
capacity leaves no instance to look at). Waits whose call had nothing to report (EC2,
whose instances' states say everything) pass none. A call that cannot start everything
yet (instances still stopping, an Azure VM's network still being made) is itself polled
until it has (:class:`StartInstances`): each call is short and goes on where the last
one stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict

from orch.clouds.base import (
    InstanceStatus,
    Operation,
    Provider,
    ProvisionConfig,
    ProvisionRecord,
    StateCheck,
)
from orch.clouds.errors import TransientError

MIN_GAP_S = 0.5
MAX_GAP_S = 15.0
# The gap after a poll is this fraction of the time waited so far (within the bounds):
# what a wait oversleeps is at most a tenth of what it waited. With a fifth, a launch's
# control-plane overhead on the simulated cloud was p50 0.97 s; with a tenth, 0.82 s
# (bench/launch_overhead.py). The cost, by this schedule: about 1.3 times the describes
# of a long wait (69 instead of 55 for a 10-minute create, describes of 0.2 s), well
# inside every cloud's describe rate limits for the 16 launches under way at once.
GAP_FRACTION = 0.1


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
    min_gap_s: float | None = None,
    max_gap_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
) -> WaitProgress:
    """Poll ``check`` until it is done; return the final progress. Errors raised by the
    check (an instance lost while booting, a failed operation) pass through. The gaps'
    bounds default to :data:`MIN_GAP_S` and :data:`MAX_GAP_S` as they are at the call
    (tests whose fakes count polls, not seconds, shorten them)."""
    min_gap_s = MIN_GAP_S if min_gap_s is None else min_gap_s
    max_gap_s = MAX_GAP_S if max_gap_s is None else max_gap_s
    while True:
        seen = check()
        progress = progress.model_copy(update={"polls": progress.polls + 1,
                                               "last_seen": seen.seen})
        report(progress)
        if seen.done:
            return progress
        waited_s = now() - progress.since
        if waited_s >= timeout_s:
            raise TransientError(
                f"gave up after {timeout_s:g} s waiting for {progress.what}: "
                f"last seen {seen.seen or 'nothing'}", code="WaitTimeout")
        sleep(next_gap(waited_s, min_gap_s, max_gap_s))


def next_gap(waited_s: float, min_gap_s: float, max_gap_s: float) -> float:
    """The sleep before the next poll, after ``waited_s`` of waiting."""
    return min(max(waited_s * GAP_FRACTION, min_gap_s), max_gap_s)


def state_check(provider: Provider, region: str, cluster_name: str,
                state: InstanceStatus) -> Callable[[], StateCheck]:
    return lambda: provider.check_instances(region, cluster_name, state)


def after_operations(provider: Provider, region: str, cluster_name: str,
                     operations: list[Operation], then: Callable[[], StateCheck]
                     ) -> Callable[[], StateCheck]:
    """A check that waits for ``operations`` to end first, then for ``then``: instances
    are looked at only once the work on them is over, so a start still under way is not
    taken for an instance that stopped, and a failed operation raises its own error."""
    settled = not operations

    def check() -> StateCheck:
        nonlocal settled
        if not settled:
            seen = provider.check_operations(region, cluster_name, operations)
            if not seen.done:
                return seen
            settled = True
        return then()

    return check


class StartInstances:
    """``run_instances`` as a check, for :func:`wait_until`: each poll calls it again until
    it has started everything (a call that had to wait for something, instances still
    stopping or a network still being made, says so in ``waiting_for``, and the next one
    goes on from there). :attr:`record` sums up what the calls did."""

    def __init__(self, provider: Provider, config: ProvisionConfig) -> None:
        self.provider, self.config = provider, config
        self.steps: list[ProvisionRecord] = []

    def __call__(self) -> StateCheck:
        self.steps.append(self.provider.run_instances(self.config))
        waiting_for = self.steps[-1].waiting_for
        return StateCheck(done=not waiting_for, seen=waiting_for)

    @property
    def record(self) -> ProvisionRecord:
        """The last call's record, with every call's instances and operations."""
        def union(lists: Iterable[list[str]]) -> list[str]:
            return list(dict.fromkeys(item for items in lists for item in items))

        return self.steps[-1].model_copy(update={
            "created_instance_ids": union(s.created_instance_ids for s in self.steps),
            "resumed_instance_ids": union(s.resumed_instance_ids for s in self.steps),
            "operations": [op for s in self.steps for op in s.operations],
        })
