"""While worker threads train, the objects that existed before the run are frozen out of the collector's walks
(runtime/heap.py): overlapping runs share one freeze, the last one to end gives the objects back, a process's
own freeze is left alone, and garbage made during a run is still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from amp_notebook import engine, models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.heap import frozen_heap, runs_freezing
from amp_notebook.runtime.train import train
from tests.conftest import overlapping_background_runs


@pytest.fixture
def nothing_frozen():
    gc.unfreeze()
    assert gc.get_freeze_count() == 0 and runs_freezing() == 0
    yield
    gc.unfreeze()


def test_nested_and_overlapping_runs_freeze_once_and_the_last_gives_the_heap_back(nothing_frozen) -> None:
    first = frozen_heap()
    first.__enter__()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    with frozen_heap():
        assert runs_freezing() == 2 and gc.get_freeze_count() == frozen  # nothing frozen twice
    assert gc.get_freeze_count() == frozen, "the inner run gave back the heap under the outer one"
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0 and runs_freezing() == 0


def test_a_process_that_froze_objects_itself_keeps_its_freeze(nothing_frozen) -> None:
    gc.freeze()
    own = gc.get_freeze_count()
    with frozen_heap():
        assert gc.get_freeze_count() == own
    assert gc.get_freeze_count() == own, "the run undid the process's own freeze"


def test_the_freeze_ends_when_the_run_raises(nothing_frozen) -> None:
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("a failed run")
    assert gc.get_freeze_count() == 0 and runs_freezing() == 0


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_cyclic_garbage_made_during_the_freeze_is_collected_and_old_garbage_afterwards(nothing_frozen) -> None:
    old = _Cycle()
    old_ref = weakref.ref(old)
    del old  # garbage already, but only the collector can free a cycle
    with frozen_heap():
        new = _Cycle()
        new_ref = weakref.ref(new)
        del new
        gc.collect()
        assert new_ref() is None, "a cycle made during the run was not collected"
        assert old_ref() is not None  # frozen with everything that existed before the run
    gc.collect()
    assert old_ref() is None, "a cycle frozen during the run was lost for good"


@pytest.mark.parametrize("engine_name", ["python", "native"])
def test_a_run_freezes_the_heap_while_it_trains_and_gives_it_back(nothing_frozen, engine_name) -> None:
    if engine_name == "native" and not engine.available():
        pytest.skip("the native engine is not built here")
    seen: list[int] = []
    data = load_digits_dataset(batch_size=20, seed=0)
    train(models.mlp(input_width=64, hidden=16), data, workers=2, epochs=1, validate=False, seed=0,
          engine=engine_name, on_key_done=lambda info: seen.append(gc.get_freeze_count()))  # fmt: skip
    assert seen and min(seen) > 0, "the heap was not frozen while the run trained"
    assert gc.get_freeze_count() == 0 and runs_freezing() == 0


def test_background_runs_ending_out_of_order_keep_the_freeze_until_the_last(nothing_frozen) -> None:
    with overlapping_background_runs(runs_freezing) as (a, _):
        a.stop()
        assert gc.get_freeze_count() > 0, "the first run to end gave the heap back under the other"
    assert gc.get_freeze_count() == 0 and runs_freezing() == 0
