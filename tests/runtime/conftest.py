"""Fixtures of the runtime tests: a 2-raylet Ray cluster on this machine, started once per test session.

Every Ray test runs on it, so cross-node message paths are exercised everywhere and Ray starts only once
(tens of seconds on a busy 2-core machine). Ray is the ``[ray]`` extra: without it the Ray tests are
skipped, except under CI (``CI`` set), where a missing Ray must fail rather than hide behind a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


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
