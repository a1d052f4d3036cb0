"""More workers, more throughput? Each model on 1 and 2 (or more) worker threads, on each engine, same run.

AMPNet's first claim is that asynchrony turns more cores into throughput. This benchmark asks it of the
threaded backend directly: the same model, data and settings on 1 worker and on N workers, for

* ``tree``: the Tree-LSTM, one tree per key (the paper's layout);
* ``ggsnn``: the GG-NN, one bAbI-15 graph per key;
* ``tagger``: the BiLSTM tagger, one sentence per key, ``max_active_keys`` 32;
* ``rnn_replicas``: the list-reduction RNN with its step Linear replicated twice behind Cond/Phi;
* ``mlp``: the paper's 4-layer MLP, 100 digits per key;

each on the native engine (worker loops without the GIL) and on the Python engine (one core for every
message's glue). Graphs, data and optimizers are the reproduction's workloads
(:mod:`amp_notebook.reproduce.workloads`, the paper's layouts); the settings are the workload's with mode
``amp``, one epoch of training keys, no validation, no trace recording, the model's ``max_active_keys``
(``MAX_ACTIVE_KEYS``), the default placement (heavy nodes round robin) and inbox order, message bundling on
(the default for amp runs). Figure per run: training instances per second.

Every (engine, model, workers) run is a side; the sides run ``repeats`` times, interleaved, the order
flipping every round (``interleaved_medians``), and each is reported by its median with every round beside
it. ``native`` and ``python`` (the JSON's headline) map each model to r = throughput on 2 workers / on 1
worker, of the medians; with other worker counts (``--workers 1,2,4,8,16`` on a bigger machine),
``ratios`` has r for each count against 1 worker, and the headline takes 2 workers when listed, else the
largest count. A 2-core machine caps r at 2; the machine's load is printed and recorded, and flagged when
other processes competed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from amp_notebook.bench.common import interleaved_medians, load_line, machine_load, report
from amp_notebook.errors import SettingError

# benchmark name -> (reproduction workload, max_active_keys)
MODELS: dict[str, tuple[str, int]] = {
    "tree": ("tree-lstm", 32),
    "ggsnn": ("ggsnn", 16),
    "tagger": ("bilstm-tagger", 32),
    "rnn_replicas": ("rnn-2-replicas", 4),
    "mlp": ("mlp", 4),
}
ENGINES = ("native", "python")
DEFAULT_WORKERS = (1, 2)


def parse_workers(text: str | Sequence[int]) -> tuple[int, ...]:
    """``"1,2,4"`` (or a sequence of ints) as sorted distinct worker counts that include 1."""
    try:
        counts = [int(t) for t in text.split(",")] if isinstance(text, str) else [int(t) for t in text]
    except ValueError:
        raise SettingError("workers", f"--workers: expected counts like 1,2,4; got {text!r}") from None
    if not counts or min(counts) < 1:
        raise SettingError("workers", f"--workers: expected counts >= 1, like 1,2,4; got {text!r}")
    if 1 not in counts:
        raise SettingError("workers", f"--workers: the ratios are against 1 worker; include it, e.g. 1,{text}")
    if len(set(counts)) < 2:
        raise SettingError("workers", f"--workers: expected a count besides 1, like 1,2; got {text!r}")
    return tuple(sorted(set(counts)))


def headline_workers(counts: Sequence[int]) -> int:
    """The count the headline ratios take: 2 when measured, else the largest."""
    return 2 if 2 in counts else max(counts)


def throughput(workload: Any, engine: str, workers: int, max_active_keys: int, seed: int) -> float:
    """Training instances per second of one epoch of ``workload`` on ``workers`` threads of ``engine``."""
    import warnings

    from amp_notebook.runtime.train import TrainResult, train

    settings = {**workload.settings, "mode": "amp", "epochs": 1, "validate": False, "trace": False, "seed": seed,
                "optimizer": workload.optimizer, "max_active_keys": max_active_keys, "engine": engine}  # fmt: skip
    with warnings.catch_warnings():  # more workers than heavy nodes leave some idle: a fact of that run
        warnings.simplefilter("ignore", UserWarning)
        r = train(workload.graph, workload.data, workers=workers, **settings)  # the workload names the default
    assert isinstance(r, TrainResult) and r.engine == engine
    return r.train_instances_per_s


def run(
    quick: bool = False, repeats: int = 3, seed: int = 0, workers: str | Sequence[int] = DEFAULT_WORKERS,
    models: Sequence[str] = tuple(MODELS), engines: Sequence[str] = ENGINES,
) -> dict[str, Any]:  # fmt: skip
    """Every model on every engine at every worker count (module docstring); ``quick``: a few keys, one
    round (a smoke test: its figures mean nothing)."""
    from amp_notebook import engine as native_engine
    from amp_notebook.reproduce.workloads import workload

    if quick:
        repeats = 1
    counts = parse_workers(workers)
    unknown = sorted(set(models) - set(MODELS)) + sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SettingError("scaling", f"unknown model or engine {unknown}; models {list(MODELS)}, engines {ENGINES}")
    notes: dict[str, str] = {}
    if "native" in engines and not native_engine.available():
        notes["native"] = f"the native engine is not available here ({native_engine.status().get('reason')})"
        engines = [e for e in engines if e != "native"]
    load_before = machine_load()["after"]
    loads = {name: workload(MODELS[name][0], quick=quick, seed=seed) for name in models}

    def side(engine: str, name: str, n: int) -> Callable[[], float]:
        return lambda: throughput(loads[name], engine, n, MODELS[name][1], seed)

    sides = {f"{e}/{m}/{n}": side(e, m, n) for e in engines for m in models for n in counts}
    medians = interleaved_medians(repeats, sides)
    per_s = {e: {m: {n: medians[f"{e}/{m}/{n}"][0] for n in counts} for m in models} for e in engines}
    rounds = {e: {m: {n: medians[f"{e}/{m}/{n}"][1] for n in counts} for m in models} for e in engines}
    ratios = {e: {m: {n: per_s[e][m][n] / per_s[e][m][1] for n in counts if n != 1} for m in models} for e in engines}
    head = headline_workers(counts)
    load = machine_load(load_before)
    result: dict[str, Any] = {e: {m: ratios[e][m][head] for m in models} if e in engines else None for e in ENGINES}
    result.update({
        "headline_workers": head, "workers": list(counts), "ratios": ratios, "instances_per_s": per_s,
        "rounds_instances_per_s": rounds,
        "ratio_per_round": {e: {m: {n: [a / b for a, b in zip(rounds[e][m][n], rounds[e][m][1], strict=True)]
                                    for n in counts if n != 1} for m in models} for e in engines},
        "settings": {m: {"workload": MODELS[m][0], "max_active_keys": MODELS[m][1],
                         "keys": len(loads[m].data.train), "layout": loads[m].layout} for m in models},
        "repeats": repeats, "seed": seed, "quick": quick, "notes": notes, "load_average_1min": load,
    })  # fmt: skip
    rows: list[tuple[str, Any]] = [("", f"instances/s at {counts} workers (median; rounds)   ratio vs 1 worker")]
    for e in engines:
        for m in models:
            figures = ", ".join(f"{per_s[e][m][n]:.0f} ({'/'.join(f'{v:.0f}' for v in rounds[e][m][n])})"
                                for n in counts)  # fmt: skip
            gains = ", ".join(f"{ratios[e][m][n]:.2f}x at {n}" for n in counts if n != 1)
            rows.append((f"{e} {m}", f"{figures}   {gains}"))
    rows += [("runs per side", f"{repeats}, interleaved, order flipped every round; medians shown"), load_line(load)]
    rows += [(f"note ({k})", v) for k, v in notes.items()]
    print(report(rows))
    return result
