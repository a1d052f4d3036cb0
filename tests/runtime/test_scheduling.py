"""Scheduling inside a worker, on the simulator (deterministic: no noise to hide behind).

The issue that motivated ``order="oldest_key"``: an MNIST-shaped MLP (784-784-784-784-10, 100 per key) on 4
simulated 1 TFLOPS devices. With arrival order inside a direction, the first heavy device runs the forward
pass of every admitted key before its co-located light ops pass the first key on, so AMP's gain over sync
*fell* as max_active_keys rose (2.38x at 4, 2.16x at 8, 1.98x at 16). Serving the key admitted earliest
first keeps the pipeline moving: the gain rises with max_active_keys until the bottleneck device is busy.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from amp_notebook.data import Batch, Dataset
from amp_notebook.models import mlp
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.train import train

KEYS = (1, 2, 4, 8, 16)


def mnist_shaped(keys: int = 32) -> Dataset:
    rng = np.random.default_rng(0)
    batches = [
        Batch({"x": rng.standard_normal((100, 784)).astype(np.float32), "target": rng.integers(0, 10, 100)}, 100)
        for _ in range(keys)
    ]
    return Dataset("mnist-shaped", batches, [], 10)


@functools.cache
def gains(mode: str, order: str) -> list[float]:
    data, graph, costs = mnist_shaped(), mlp(input_width=784, hidden=784, classes=10), CostModel.tflops_device()
    common = {"workers": 4, "backend": "simulated", "costs": costs, "validate": False, "order": order}
    sync = train(graph, data, mode="sync", **common).wall_s
    return [sync / train(graph, data, mode=mode, max_active_keys=k, **common).wall_s for k in KEYS]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["amp", "pipeline"])
def test_oldest_key_first_makes_throughput_rise_with_max_active_keys(mode):
    rising = gains(mode, "oldest_key")
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(rising)), rising
    assert rising[-1] > rising[0] * 2.2


@pytest.mark.slow
def test_arrival_order_lets_the_gain_fall_as_keys_are_added():
    falling = gains("amp", "arrival")
    assert falling[3] < falling[2] and falling[4] < falling[3], falling
    assert max(falling) < max(gains("amp", "oldest_key"))
