"""What tracing costs: the same run with tracing on and off, alternately, medians.

Uses the list-reduction RNN (many light messages per key, so the per-message cost of tracing shows
more than on a matmul-heavy MLP). Figure: throughput with tracing / throughput without.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.bench.common import interleaved_medians, report
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.train import train


def run(repeats: int = 7, n_train: int = 10_000, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, n_train = 3, 2000
    data = list_reduction_dataset(n_train=n_train, n_val=100)
    g = rnn()

    def rate(tracing: bool) -> float:
        r = train(g, data, workers=2, mode="amp", max_active_keys=4, validate=False, trace=tracing,
                  optimizer={"name": "adam", "lr": 1e-3})  # fmt: skip
        return r.train_instances_per_s

    med = interleaved_medians(repeats, {"on": lambda: rate(True), "off": lambda: rate(False)})
    on, off = med["on"][0], med["off"][0]
    result = {
        "traced_per_s": on, "untraced_per_s": off, "ratio": on / off, "repeats": {k: v[1] for k, v in med.items()}
    }  # fmt: skip
    print(report([("traced inst/s", f"{on:.0f}"), ("untraced inst/s", f"{off:.0f}"), ("ratio", f"{on / off:.3f}")]))
    return result
