"""What every test shares: the small datasets, the thread-leak guard, and the fast/slow tiers.

Datasets. ``digits_dataset`` and ``lists_dataset`` build (and cache for the session) the two small
datasets most tests train on; the ``digits`` and ``lists`` fixtures give their defaults, and a test module
that needs another bucket size overrides the fixture with one line calling the loader. Tests must not
mutate a dataset they are given (they are shared).

Threads. Every test must end with no run, worker, driver or feed thread of its own still alive: the
``no_leaked_threads`` guard waits a moment for threads started during the test to finish (a run that was
stopped joins its threads), then fails the test and names the threads that are left.

Ray. ``ray_cluster`` starts a 2-raylet Ray cluster on this machine once per session for the Ray backend's
tests (worker 0 and worker 1 sit on different Ray nodes, so messages cross nodes). Without the ``[ray]``
extra those tests are skipped, except under CI (``CI`` set), where a missing Ray fails them.

Tiers. ``pytest -m "not slow"`` is the fast tier (seconds); the browser tests, the executed tutorials and
the long training tests carry the ``slow`` marker (the browser tests and notebooks get it here).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amp_notebook.data import Dataset, list_reduction_dataset, load_digits_dataset

LEAK_GRACE_S = 10.0
RUNTIME_THREAD_PREFIXES = ("amp-", "builder-run-status")


@functools.cache
def digits_dataset(batch_size: int = 100, seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits in keys of ``batch_size`` (100: 15 training keys, 4 validation keys)."""
    return load_digits_dataset(batch_size=batch_size, seed=seed)


@contextmanager
def overlapping_background_runs(runs_holding: Callable[[], int]) -> Iterator[tuple[Any, Any]]:
    """Two background runs of a small MLP on the digits (2 workers, amp), yielded once ``runs_holding()`` (a
    process-wide setting's count of runs: the BLAS limit's, the heap freeze's) says both train; both are stopped
    when the block ends."""
    from amp_notebook import models
    from amp_notebook.runtime.train import train

    data = load_digits_dataset(batch_size=20, seed=0)
    opts = {"workers": 2, "mode": "amp", "max_active_keys": 2, "epochs": 10_000, "validate": False, "seed": 0}
    a = train(models.mlp(input_width=64, hidden=16), data, background=True, **opts)
    b = train(models.mlp(input_width=64, hidden=16), data, background=True, **opts)
    try:
        deadline = time.monotonic() + 20
        while runs_holding() < 2:
            assert time.monotonic() < deadline, "both runs should be training"
            time.sleep(0.01)
        yield a, b
    finally:
        a.stop()
        b.stop()


@functools.cache
def lists_dataset(
    n_train: int = 400, n_val: int = 100, bucket_size: int = 50, seed: int = 0, max_len: int = 10
) -> Dataset:
    """The paper's list-reduction task, bucketed by total length into keys of <= ``bucket_size`` lists."""
    return list_reduction_dataset(n_train=n_train, n_val=n_val, bucket_size=bucket_size, seed=seed, max_len=max_len)


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return digits_dataset()


@pytest.fixture(scope="session")
def lists() -> Dataset:
    return lists_dataset()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (pip install -e '.[ray]'); CI must run the Ray tests")
        pytest.skip("ray is not installed (pip install -e '.[ray]')")
    from ray._common.utils import get_default_ray_temp_dir

    from amp_notebook.runtime.backends import ray_cluster as rc

    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)  # the Cluster writes its address there
    with rc.ray_process_environment():
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
        cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _runtime_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(RUNTIME_THREAD_PREFIXES)}


def native_threads() -> list[str]:
    """The native engine's worker threads alive in this process, by name (``amp-native-<worker>``), read from
    /proc: Python's ``threading`` does not list threads it did not start."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended while we looked
            continue
        if name.startswith("amp-native"):
            names.append(name)
    return sorted(names)


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = _runtime_threads()
    native_before = len(native_threads())
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    for t in _runtime_threads() - before:
        t.join(max(0.0, deadline - time.monotonic()))
    left = sorted(t.name for t in _runtime_threads() - before if t.is_alive())
    assert not left, f"the test left threads running: {left}; stop its runs (run.stop()) and close its dashboards"
    while len(native_threads()) > native_before and time.monotonic() < deadline:
        time.sleep(0.01)
    native_left = native_threads()
    assert len(native_left) <= native_before, f"the test left native worker threads running: {native_left}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests and executed notebooks belong to the slow tier."""
    for item in items:
        if item.get_closest_marker("browser") is not None or item.nodeid.startswith("tutorials/"):
            item.add_marker(pytest.mark.slow)
