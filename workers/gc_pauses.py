"""The worker's garbage collector: the start-up heap frozen, long collections logged.

With 2,000 running managed jobs the worker holds their cached workflows, close to a
gigabyte of Python objects. CPython collects its oldest generation whenever it has grown
by a quarter since the last full collection, and such a collection stops every workflow
task and heartbeat of the worker while it walks the whole heap: in the fifth 2,000-job
run (README, Performance) one came every 35 to 40 s and took up to 2.2 s. So:

- the objects that exist once the worker has imported everything (modules, the SDK,
  pydantic's schemas) are frozen: never collected, and never walked again;
- the youngest generation is collected every ``YOUNG_ALLOCATIONS`` allocations instead
  of CPython's 700, and the middle one after 20 of those: the objects of a workflow task
  (protobufs, pydantic records, coroutines) live some milliseconds to seconds, and with
  the defaults they were promoted to the oldest generation, which then filled by a quarter
  every 35 s. With this setting the sixth run logged no full collection over 0.2 s in 25
  minutes, up to 2,000 jobs;
- every full collection that takes longer than ``SLOW_S`` is logged with its duration
  and the number of objects left in the oldest generation, so a stall can be told apart
  from a GC pause.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

SLOW_S = 0.2
YOUNG_ALLOCATIONS = 50_000
_log = logging.getLogger(__name__)


class _FullCollections:
    """A `gc.callbacks` entry: times each collection of the oldest generation."""

    def __init__(self) -> None:
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        took, self._started = time.perf_counter() - self._started, None
        if took >= SLOW_S:
            _log.warning("full garbage collection took %.2f s (%d objects tracked, %d "
                         "collected)", took, len(gc.get_objects(2)), info.get("collected", 0))


def tune_garbage_collection() -> None:
    """Freeze what start-up made and log slow full collections (module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, 20, 10)
    gc.callbacks.append(_FullCollections())
