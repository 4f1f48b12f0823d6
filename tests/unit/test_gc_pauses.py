"""The worker's garbage-collector tuning: the start-up heap is frozen and a slow full
collection is logged (workers/gc_pauses.py)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest

from workers import gc_pauses


@pytest.fixture
def tuned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    callbacks, thresholds = list(gc.callbacks), gc.get_threshold()
    monkeypatch.setattr(gc_pauses, "SLOW_S", 0.0)  # every full collection is "slow"
    gc_pauses.tune_garbage_collection()
    yield
    gc.callbacks[:] = callbacks
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_start_up_objects_are_frozen_and_full_collections_are_logged(
    tuned: None, caplog: pytest.LogCaptureFixture,
) -> None:
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == gc_pauses.YOUNG_ALLOCATIONS
    with caplog.at_level(logging.WARNING, logger=gc_pauses.__name__):
        gc.collect(1)  # a young collection: not logged
        assert not caplog.records
        gc.collect()
    [record] = caplog.records
    assert record.getMessage().startswith("full garbage collection took ")
    assert "objects tracked" in record.getMessage()
