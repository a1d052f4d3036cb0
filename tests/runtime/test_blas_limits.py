"""Overlapping runs share one BLAS limit: it is set while any run trains and the user's setting comes back
only when the last one has ended (a run that ends first must not lift the limit under another, nor may the
last one leave it at one thread)."""

from __future__ import annotations

import time

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.blas import runs_limiting, single_threaded_blas
from amp_notebook.runtime.train import train
from tests.conftest import overlapping_background_runs


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("numpy here uses no BLAS library threadpoolctl can see")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


def test_nested_and_overlapping_limits_restore_once(two_blas_threads) -> None:
    first = single_threaded_blas()
    first.__enter__()
    assert set(blas_threads()) == {1}
    with single_threaded_blas():
        assert set(blas_threads()) == {1} and runs_limiting() == 2
    assert set(blas_threads()) == {1}  # the inner one ended: the outer still holds the limit
    first.__exit__(None, None, None)
    assert set(blas_threads()) == {2} and runs_limiting() == 0


def test_background_runs_ending_out_of_order_leave_the_users_setting(two_blas_threads) -> None:
    with overlapping_background_runs(runs_limiting) as (a, _):
        a.stop()
        assert set(blas_threads()) == {1}, "the first run to end lifted the limit under the other"
    assert set(blas_threads()) == {2}, "the last run to end should restore the user's setting"


def test_background_run_after_a_foreground_one_still_limits_and_restores(two_blas_threads) -> None:
    # OpenBLAS ignores changes from other threads once the main thread has set a count (as the foreground
    # run does): the background run must take the limit in the thread that starts it.
    data = load_digits_dataset(batch_size=20, seed=0)
    opts = {"workers": 2, "mode": "amp", "max_active_keys": 2, "validate": False, "seed": 0}
    train(models.mlp(input_width=64, hidden=16), data, epochs=1, **opts)
    assert set(blas_threads()) == {2}
    run = train(models.mlp(input_width=64, hidden=16), data, background=True, epochs=10_000, **opts)
    try:
        assert set(blas_threads()) == {1}, "the background run trains with more than one BLAS thread"
    finally:
        run.stop()
    assert set(blas_threads()) == {2}


def test_a_run_that_ends_on_its_own_restores_at_the_next_look_from_its_thread(two_blas_threads) -> None:
    data = load_digits_dataset(batch_size=20, seed=0)
    run = train(models.mlp(input_width=64, hidden=16), data, background=True, epochs=1, workers=2, seed=0)
    deadline = time.monotonic() + 20
    while not run._driver.done.is_set():  # wait without touching the run's public methods
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert run.state == "finished"
    assert set(blas_threads()) == {2}


def test_in_ipython_the_next_cell_gets_the_users_setting_back(two_blas_threads) -> None:
    # a notebook user who never touches a run that ended on its own must not keep one BLAS thread
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        data = load_digits_dataset(batch_size=20, seed=0)
        run = train(models.mlp(input_width=64, hidden=16), data, background=True, epochs=1, workers=2, seed=0)
        deadline = time.monotonic() + 20
        while not run._driver.done.is_set():  # without touching the run's public methods
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert runs_limiting() == 0 and set(blas_threads()) == {1}, "restore is due, not yet done"
        shell.run_cell("pass")  # the next cell
        assert set(blas_threads()) == {2}
        shell.run_cell("pass")  # and the hook is harmless when nothing is due
        assert set(blas_threads()) == {2}
    finally:
        InteractiveShell.clear_instance()
