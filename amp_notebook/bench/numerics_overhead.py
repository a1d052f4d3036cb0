"""What the non-finite checks cost: the same run with ``on_nonfinite="raise"`` (the default) and ``"ignore"``.

Two models, each side run alternately (the order flips every round), medians: the list-reduction RNN (many
light messages per key: the loss and update checks are a larger share of each key's work) and the paper's
MLP with 784 hidden units (each update checks 784 x 784 gradients with one reduction each). Figure:
throughput with the checks / throughput without.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.bench.common import interleaved_medians, report
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.mlp import mlp
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.train import train


def run(repeats: int = 7, n_train: int = 10_000, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, n_train = 3, 2000
    lists, digits = list_reduction_dataset(n_train=n_train, n_val=100), load_digits_dataset(batch_size=100)
    rnn_graph, mlp_graph = rnn(), mlp(input_width=64, hidden=784)

    def rnn_rate(policy: str) -> float:
        r = train(rnn_graph, lists, workers=2, mode="amp", max_active_keys=4, min_update_frequency=10, max_bundle=1,
                  validate=False, optimizer={"name": "adam", "lr": 1e-3}, on_nonfinite=policy)  # fmt: skip
        return r.train_instances_per_s

    def mlp_rate(policy: str) -> float:
        r = train(mlp_graph, digits, workers=2, mode="amp", max_active_keys=4, epochs=3 if quick else 10,
                  validate=False, optimizer={"name": "sgd", "lr": 0.05}, on_nonfinite=policy, max_bundle=1)  # fmt: skip
        return r.train_instances_per_s

    med = interleaved_medians(
        repeats,
        {"rnn_checked": lambda: rnn_rate("raise"), "rnn_unchecked": lambda: rnn_rate("ignore"),
         "mlp_checked": lambda: mlp_rate("raise"), "mlp_unchecked": lambda: mlp_rate("ignore")},
    )  # fmt: skip
    figures = {k: v[0] for k, v in med.items()}
    result = {
        **{f"{k}_per_s": v for k, v in figures.items()},
        "rnn_ratio": figures["rnn_checked"] / figures["rnn_unchecked"],
        "mlp_ratio": figures["mlp_checked"] / figures["mlp_unchecked"],
        "repeats": {k: v[1] for k, v in med.items()},
    }
    print(report([
        ("rnn inst/s, checks on", f"{figures['rnn_checked']:.0f}"),
        ("rnn inst/s, checks off", f"{figures['rnn_unchecked']:.0f}"),
        ("rnn ratio", f"{result['rnn_ratio']:.3f}"),
        ("mlp inst/s, checks on", f"{figures['mlp_checked']:.0f}"),
        ("mlp inst/s, checks off", f"{figures['mlp_unchecked']:.0f}"),
        ("mlp ratio", f"{result['mlp_ratio']:.3f}"),
    ]))  # fmt: skip
    return result
