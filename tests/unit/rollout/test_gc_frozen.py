"""The run's collector setting: what existed before the run is frozen while it runs, and given
back to the collector afterwards (unless a caller froze first: theirs to undo)."""

from __future__ import annotations

import gc

import pytest

from fleet.jobs.rollout.engine import RUN_GC_THRESHOLD, _long_lived_frozen


def test_frozen_during_the_run_and_unfrozen_after() -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    with _long_lived_frozen():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] >= RUN_GC_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), _long_lived_frozen():
        raise RuntimeError("a run that fails gives the objects back too")
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone() -> None:
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with _long_lived_frozen():
            pass
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()
