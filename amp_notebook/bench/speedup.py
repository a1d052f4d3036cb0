"""Asynchrony's throughput gain: the paper's 4-layer MLP (784 hidden, 100 instances per key).

Same graph, same data, same run: mode ``amp`` with max_active_keys 4 on 2 workers against mode ``sync``
(one key at a time, update after each key) on the same 2 workers. Figure: training instances per
second of each and their ratio (the paper reports about 3x on its 4-layer MLP with more workers).
"""

from __future__ import annotations

from typing import Any

from amp_notebook.bench.common import interleaved_medians, repeat_epochs, report
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.models.mlp import mlp
from amp_notebook.runtime.train import train


def run(repeats: int = 5, copies: int = 4, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, copies = 3, 1
    data = repeat_epochs(load_digits_dataset(batch_size=100), copies)
    g = mlp(input_width=64, hidden=784)

    def rate(mode: str) -> float:
        r = train(
            g, data, workers=2, mode=mode, max_active_keys=4, validate=False, optimizer={"name": "sgd", "lr": 0.05}
        )
        return r.train_instances_per_s

    med = interleaved_medians(repeats, {"amp": lambda: rate("amp"), "sync": lambda: rate("sync")})
    amp, sync = med["amp"][0], med["sync"][0]
    result = {
        "amp_per_s": amp, "sync_per_s": sync, "ratio": amp / sync,
        "repeats": {k: v[1] for k, v in med.items()}, "keys": len(data.train), "hidden": 784, "batch": 100,
    }  # fmt: skip
    print(report([("amp (K=4) inst/s", f"{amp:.0f}"), ("sync inst/s", f"{sync:.0f}"), ("ratio", f"{amp / sync:.2f}")]))
    return result
