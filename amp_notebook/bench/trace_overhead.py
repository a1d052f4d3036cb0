"""What tracing costs: the same run with tracing on and off, alternately, medians.

Uses the list-reduction RNN (many light messages per key, so the per-message cost of tracing shows
more than on a matmul-heavy MLP). Figure: throughput with tracing / throughput without. The same run
also measures the worst case, the no-op chain of ``bench overhead`` where a message does nothing but
glue, as microseconds per message traced and untraced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_notebook.bench.common import constant_dataset, interleaved_medians, report
from amp_notebook.bench.overhead import chain
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.train import train
from amp_notebook.trace.buffers import PHASES

# Sizes: runs of about half a second on the native engine (at 10,000 lists and 2,000 keys they lasted about 0.1 s
# and 20 ms, and the ratio moved with how a run starts and ends).
N_TRAIN, CHAIN_KEYS = 60_000, 20_000


def run(repeats: int = 7, n_train: int = N_TRAIN, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, n_train = 3, 2000
    data = list_reduction_dataset(n_train=n_train, n_val=100)
    g = rnn()

    def rate(tracing: bool) -> float:
        r = train(g, data, workers=2, mode="amp", max_active_keys=4, validate=False, trace=tracing,
                  optimizer={"name": "adam", "lr": 1e-3}, max_bundle=1)  # fmt: skip
        return r.train_instances_per_s

    chain_graph, chain_data = chain(), constant_dataset(300 if quick else CHAIN_KEYS, 1)

    def chain_run(tracing: bool) -> Any:
        return train(chain_graph, chain_data, workers=2, mode="amp", max_active_keys=16, validate=False,
                     dtype="float64", trace=tracing, max_bundle=1)  # fmt: skip

    # messages handled per run, counted once from a traced run (update rows are not messages)
    phases = chain_run(True).trace.events()["phase"]
    messages = int(np.count_nonzero(phases != PHASES.index("update")))

    def chain_us(tracing: bool) -> float:
        return chain_run(tracing).wall_s / messages * 1e6

    med = interleaved_medians(
        repeats,
        {"on": lambda: rate(True), "off": lambda: rate(False),
         "chain_on": lambda: chain_us(True), "chain_off": lambda: chain_us(False)},
    )  # fmt: skip
    on, off = med["on"][0], med["off"][0]
    c_on, c_off = med["chain_on"][0], med["chain_off"][0]
    result = {
        "traced_per_s": on, "untraced_per_s": off, "ratio": on / off,
        "chain_us_per_message_traced": c_on, "chain_us_per_message_untraced": c_off,
        "chain_ratio": c_off / c_on, "repeats": {k: v[1] for k, v in med.items()},
    }  # fmt: skip
    print(report([
        ("rnn traced inst/s", f"{on:.0f}"), ("rnn untraced inst/s", f"{off:.0f}"), ("ratio", f"{on / off:.3f}"),
        ("no-op chain us/message traced", f"{c_on:.2f}"), ("no-op chain us/message untraced", f"{c_off:.2f}"),
        ("no-op chain throughput ratio", f"{c_off / c_on:.3f}"),
    ]))  # fmt: skip
    return result
