"""Heartbeats that keep going while a cloud call blocks.

A synchronous activity can only heartbeat between calls, and one cloud call may take
longer than the heartbeat timeout (a DescribeInstances answered in 30 s, an Azure create
accepted after a minute). :class:`Heartbeats` sends the latest details from a side thread
every few seconds for as long as the activity runs, so the server tells a slow call (the
worker heartbeats) from a dead worker (it stops): a worker killed in any cloud call is
noticed within the heartbeat timeout, not at the start-to-close timeout.

The side thread runs in a copy of the activity's context, which is how temporalio finds
the activity to heartbeat; its heartbeat function is thread-safe for threaded activities.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from temporalio import activity

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_EVERY_S = 5.0


def beat_interval(timeout: timedelta | None) -> float:
    """A quarter of the heartbeat timeout (four chances before the server gives up),
    at most :data:`DEFAULT_EVERY_S`."""
    if timeout is None:
        return DEFAULT_EVERY_S
    return max(0.1, min(DEFAULT_EVERY_S, timeout.total_seconds() / 4))


class Heartbeats:
    """A context manager: heartbeats ``details`` (replaced with :meth:`update`) from a
    side thread until the block ends."""

    def __init__(self, details: Any = None) -> None:
        self._details = details
        self._stop = threading.Event()
        self._every = beat_interval(activity.info().heartbeat_timeout)
        self._context = contextvars.copy_context()
        self._thread = threading.Thread(target=self._context.run, args=(self._run,),
                                        name="heartbeats", daemon=True)

    def update(self, details: Any) -> None:
        self._details = details
        activity.heartbeat(details)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            activity.heartbeat(self._details)

    def __enter__(self) -> Heartbeats:
        activity.heartbeat(self._details)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


@asynccontextmanager
async def beating(details: Any = None) -> AsyncIterator[None]:
    """For an async activity: heartbeat ``details`` from the event loop every
    :func:`beat_interval` while the block runs."""
    every = beat_interval(activity.info().heartbeat_timeout)

    async def beat() -> None:
        while True:
            activity.heartbeat(details)
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


def heartbeating(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a synchronous activity under :class:`Heartbeats` (details: its name)."""
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with Heartbeats(f"in {fn.__name__}"):
            return fn(*args, **kwargs)

    return wrapper


def earlier_details() -> object:
    """The last heartbeat details of an earlier attempt of this activity, or None."""
    details = activity.info().heartbeat_details
    return details[0] if details else None
