"""The BiLSTM tagger, ours at max_active_keys 32 and 1 against two PyTorch peers, same data, same weights, same run.

The paper's Table 2 reports 3.2x for this model at max_active_keys 32 over 1 on 16 cores; here the question is
what asynchrony buys on this machine, next to what PyTorch does with the same model.

Data: ``synthetic_ner_dataset`` (synthetic NER sentences, 5..23 words, a Zipfian vocabulary: a fifth to a
third of the training tokens, fewer as the training set grows, are rare words spelled by the character
model). Model everywhere: DyNet's sizes
(word embedding 128, char embedding 20, char LSTM 64 per direction, word LSTM 50 per direction, MLP 32;
``models.bilstm_tagger``; torch: ``bench.torch_tagger.TorchTagger``, whose loss and gradients equal our
interpreter's, ``tests/bench/test_torch_tagger.py``). Every side starts from the same weights: our graph's
``init_params(seed)`` (our initialisation policy: Linears uniform in +-1/sqrt(fan in) as torch.nn.Linear,
embeddings N(0, 1)), loaded into the torch model. Optimizer: Adam, lr 3e-3, gradients clipped to norm 5
(ours per node, as our optimizers clip; torch over the whole model).

- ours_mak32 / ours_mak1: one sentence per key (the paper's layout), mode amp, 2 workers, the model's
  per-node update frequencies (``models.bilstm_tagger.UPDATE_FREQUENCY``: about a sentence's worth of
  gradients; the other nodes after each), ``max_active_keys`` 32 or 1, no trace recording, the paper's
  placement (heavy ops round-robin) and the default inbox order (``light_first`` on 2 workers).
- ours_mak32_bundled: the same at 32 with ``max_bundle=32``: a node takes up to 32 waiting messages of
  different keys (same port and direction) as one call on their stacked rows, so the sentences in flight
  share each recurrent step's Linear and gate update (the runtime's message bundling).
- ours_mak32_python: ours_mak32 on the Python engine. Every other side of ours runs on the default engine
  (``engine="auto"``: the native worker loops wherever the extension is built), so the headline ratios
  (``ratio_vs_eager``, ``ratio_vs_batched``, ``speedup_mak32_vs_mak1``) are the default engine's; each side
  records the engine that ran (``engine``, printed in the table) and ``engine_gain`` divides ours_mak32 by
  ours_mak32_python.
- torch_eager: one sentence at a time (``eager_losses``: each rare word through the char BiLSTM on its own,
  then the word BiLSTM), an Adam step after each sentence, as DyNet's benchmark trains.
- torch_batched: minibatches of ``TORCH_BATCH`` sentences, packed sequences (``batched_losses``), an Adam step
  per minibatch (the mean of its sentences' mean token losses).

torch runs with ``torch.set_num_threads(1)``: intra-op threads cannot help tensors this small (one sentence,
50-wide LSTM steps), and on this shared 2-core machine 2 threads ran the same eager loop 7 times slower
(15.6 vs 111 sentences/s, measured once with the machine's load average at 4). Each side trains the same
epochs and evaluates token accuracy on the validation sentences after each; evaluation time counts. Figures per side:
``instances_per_s`` = the median over epochs of training sentences per second of that epoch
(``epoch_instances_per_s`` has each), ``final_metric`` = validation token accuracy after the last epoch.
``speedup_mak32_vs_mak1`` is ours at 32 over ours at 1 (the paper: 3.2 on 16 cores); ratios vs torch divide
ours at 32 by each peer. Sides run ``repeats`` times, interleaved, the order flipping every round; each is
reported by its run of median throughput with every run's figures beside it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from amp_notebook.bench.common import interleaved_runs, load_line, machine_load, median_run, report
from amp_notebook.data.batch import Dataset
from amp_notebook.data.ner import synthetic_ner_dataset

OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3, "clip_norm": 5.0}
OURS: dict[str, Any] = {"mode": "amp", "workers": 2, "min_update_frequency": 1, "trace": False}
TORCH_THREADS, TORCH_BATCH = 1, 32
PAPER_SPEEDUP_MAK32 = 3.2  # AMPNet paper, Table 2, BiLSTM tagger on Wikiner, 16 cores


def _sizes(data: Dataset) -> dict[str, int]:
    return {k: int(data.meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}  # type: ignore[call-overload]


def ours(
    data: Dataset, epochs: int, seed: int, max_active_keys: int, max_bundle: int = 1, engine: str = "auto"
) -> dict[str, Any]:  # fmt: skip
    """Our side: one sentence per key, asynchronous with ``max_active_keys`` sentences in flight."""
    from amp_notebook.models import bilstm_tagger
    from amp_notebook.models.bilstm_tagger import UPDATE_FREQUENCY
    from amp_notebook.runtime.train import TrainResult, train

    graph = bilstm_tagger(**_sizes(data))
    settings = {**OURS, "max_active_keys": max_active_keys, "max_bundle": max_bundle, "engine": engine}
    r = train(graph, data, epochs=epochs, seed=seed, optimizer=OPTIMIZER, params=graph.init_params(seed), **settings)
    assert isinstance(r, TrainResult)
    per_epoch: list[float] = []
    previous = 0.0
    for stats in r.history:
        per_epoch.append(len(data.train) / (stats.end_s - previous))
        previous = stats.end_s
    return {
        "instances_per_s": statistics.median(per_epoch),
        "epoch_instances_per_s": per_epoch,
        "final_metric": r.history[-1].val_accuracy,
        "val_accuracy": [e.val_accuracy for e in r.history],
        "staleness": r.staleness(),
        "wall_s": r.wall_s,
        "engine": r.engine,
        "settings": {
            **settings,
            "optimizer": OPTIMIZER,
            "sentences_per_key": 1,
            "node_min_update_frequency": dict(UPDATE_FREQUENCY),
        },
    }


def torch_side(data: Dataset, epochs: int, seed: int, batched: bool) -> dict[str, Any]:
    """A PyTorch peer: one sentence per step (eager) or packed minibatches of ``TORCH_BATCH`` (batched)."""
    import torch

    from amp_notebook.bench import torch_tagger as tt
    from amp_notebook.models import bilstm_tagger

    torch.set_num_threads(TORCH_THREADS)
    model = tt.TorchTagger(bilstm_tagger(**_sizes(data)).init_params(seed))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=OPTIMIZER["lr"])
    losses_of = tt.batched_losses if batched else tt.eager_losses
    train_sentences = [s for key in data.train for s in tt.key_arrays(key)]
    val_sentences = [s for key in data.val for s in tt.key_arrays(key)]
    losses_of(model, train_sentences[:TORCH_BATCH])[0].mean().backward()  # untimed warm-up (lazy kernels)
    model.zero_grad()
    rng = np.random.default_rng(seed)
    step = TORCH_BATCH if batched else 1
    per_epoch: list[float] = []
    accuracy: list[float] = []
    for _ in range(epochs):
        start = time.perf_counter()
        order = rng.permutation(len(train_sentences))
        for i in range(0, len(order), step):
            opt.zero_grad()
            losses_of(model, [train_sentences[j] for j in order[i : i + step]])[0].mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIMIZER["clip_norm"])
            opt.step()
        accuracy.append(_token_accuracy(model, val_sentences))
        per_epoch.append(len(order) / (time.perf_counter() - start))
    return {
        "instances_per_s": statistics.median(per_epoch),
        "epoch_instances_per_s": per_epoch,
        "final_metric": accuracy[-1],
        "val_accuracy": accuracy,
        "settings": {"threads": TORCH_THREADS, "sentences_per_step": step, "optimizer": OPTIMIZER,
                     "method": "packed minibatches" if batched else "one sentence at a time",
                     "torch": torch.__version__},
    }  # fmt: skip


def _token_accuracy(model: Any, sentences: list[Any]) -> float:
    import torch

    from amp_notebook.bench import torch_tagger as tt

    correct = total = 0
    with torch.no_grad():
        for i in range(0, len(sentences), 256):
            chunk = sentences[i : i + 256]
            _, logits = tt.batched_losses(model, chunk)
            tags = torch.cat([s.tags for s in chunk])
            correct += int((logits.argmax(1) == tags).sum())
            total += tags.numel()
    return correct / max(total, 1)


def run(
    quick: bool = False, n_train: int = 400, n_val: int = 100, epochs: int = 2, seed: int = 0, repeats: int = 3
) -> dict[str, Any]:  # fmt: skip
    """Train all sides on the same sentences, ``repeats`` times each, interleaved (module doc);
    ``--quick``: a few sentences, once (a smoke test; its figures mean nothing)."""
    if quick:
        n_train, n_val, epochs, repeats = 24, 8, 1, 1
    data = synthetic_ner_dataset(n_train=n_train, n_val=n_val, seed=seed)
    load_before = machine_load()["after"]
    runs = interleaved_runs(
        repeats,
        {
            "ours_mak32": lambda: ours(data, epochs, seed, 32),
            "ours_mak1": lambda: ours(data, epochs, seed, 1),
            "ours_mak32_bundled": lambda: ours(data, epochs, seed, 32, max_bundle=32),
            "ours_mak32_python": lambda: ours(data, epochs, seed, 32, engine="python"),
            "torch_eager": lambda: torch_side(data, epochs, seed, batched=False),
            "torch_batched": lambda: torch_side(data, epochs, seed, batched=True),
        },
    )
    load = machine_load(load_before)
    a32, a1, bundled, a32_python, eager, batched = (median_run(runs[name]) for name in runs)

    def per_round(num: str, den: str) -> list[float]:
        return [n["instances_per_s"] / d["instances_per_s"] for n, d in zip(runs[num], runs[den], strict=True)]

    result = {
        "ours_mak32": a32, "ours_mak1": a1, "ours_mak32_bundled": bundled, "ours_mak32_python": a32_python,
        "torch_eager": eager, "torch_batched": batched,
        "engine_gain": a32["instances_per_s"] / a32_python["instances_per_s"],
        "speedup_mak32_vs_mak1": a32["instances_per_s"] / a1["instances_per_s"],
        "speedup_mak32_vs_mak1_per_round": per_round("ours_mak32", "ours_mak1"),
        "speedup_mak32_bundled_vs_mak1": bundled["instances_per_s"] / a1["instances_per_s"],
        "speedup_mak32_bundled_vs_mak1_per_round": per_round("ours_mak32_bundled", "ours_mak1"),
        "paper_speedup_mak32_vs_mak1": PAPER_SPEEDUP_MAK32,
        "ratio_vs_eager": a32["instances_per_s"] / eager["instances_per_s"],
        "ratio_vs_eager_per_round": per_round("ours_mak32", "torch_eager"),
        "ratio_vs_batched": a32["instances_per_s"] / batched["instances_per_s"],
        "ratio_vs_batched_per_round": per_round("ours_mak32", "torch_batched"),
        "repeats": repeats, "n_train": n_train, "n_val": n_val, "epochs": epochs, "seed": seed,
        "data": {k: data.meta[k] for k in ("train_tokens", "rare_token_fraction", "val_majority_fraction")},
        "load_average_1min": load,
    }  # fmt: skip
    rows: list[tuple[str, Any]] = [("", "sentences/s (median epoch)   val token accuracy")]
    sides = (("ours, max_active_keys 32", a32), ("ours, max_active_keys 1", a1),
             ("ours, 32, bundles of <= 32", bundled), ("ours, max_active_keys 32", a32_python),
             ("torch eager", eager), ("torch batched (packed)", batched))  # fmt: skip
    for name, side in sides:
        label = f"{name} [{side['engine']}]" if "engine" in side else name
        rows.append((label, f"{side['instances_per_s']:>10.1f}   {side['final_metric']:>24.4f}"))
    rows += [
        ("ours 32 / ours 1", f"{result['speedup_mak32_vs_mak1']:.2f} (rounds: "
         f"{', '.join(f'{r:.2f}' for r in result['speedup_mak32_vs_mak1_per_round'])}; paper: 3.2 on 16 cores)"),
        ("ours 32 bundled / ours 1", f"{result['speedup_mak32_bundled_vs_mak1']:.2f} (rounds: "
         f"{', '.join(f'{r:.2f}' for r in result['speedup_mak32_bundled_vs_mak1_per_round'])})"),
        ("ours 32 / torch eager", f"{result['ratio_vs_eager']:.2f}"),
        ("ours 32 / torch batched", f"{result['ratio_vs_batched']:.2f}"),
        ("ours 32: default engine / Python engine", f"{result['engine_gain']:.2f}"),
        ("runs per side", f"{repeats}, interleaved; medians shown"),
        load_line(load),
    ]  # fmt: skip
    print(report(rows))
    return result
