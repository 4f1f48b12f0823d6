"""Running a piece of workflow code to its end although the workflow is cancelled meanwhile:
the cleanup of a cancelled workflow (a teardown) must not be cut short by a second cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def shielded(work: Awaitable[T]) -> T:
    """Run ``work`` to its end even if the workflow is cancelled meanwhile; a cancellation
    that arrived is raised after it."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError()
    return task.result()
