"""The paper's Table 2: training throughput at max_active_keys 1 and at 4, 16 and 32, and their ratio.

For every model of :mod:`amp_notebook.reproduce.workloads` (mlp, rnn, rnn with 2 replicas, tree-lstm,
ggsnn, bilstm-tagger), mode ``amp``, one epoch of its training keys, no validation, no trace; figures are
training instances per second. Each row gives ours, our ratio to max_active_keys 1, the paper's ratio
where we have it, and a PyTorch peer's throughput on the same data. Two backends:

**threads**: this machine, 2 worker threads (its 2 cores). Placement ``auto``
(:mod:`amp_notebook.runtime.autoplace`: node costs measured here once per model, the fastest of round
robin, balanced stages and a local search on the simulator, chosen once per max_active_keys before the
timed runs), ``fifo`` inboxes (arrival order keeps both workers fed; ``amp-notebook bench speedup``
compares it with backward-first). Each max_active_keys and the peer run ``repeats`` times, interleaved
with the order flipping every round (this machine is shared and noisy); the median is reported and every
round is kept in ``runs``. The ratio here can reach at most 2 (two cores).

**simulated**: the paper's machine, 16 cores, as 16 simulated devices calibrated from this machine.
Calibration: :func:`~amp_notebook.runtime.autoplace.measure_costs` runs a short traced sync training on
one worker thread here and fixes every node's forward, backward and update time at the median of its
trace rows; a node the sample never reached costs FLOPs over this core's measured matmul FLOP/s plus its
measured per-message overhead (:meth:`CostModel.this_cpu`). Each simulated device is then one core of this
machine running our Python runtime, glue and all, with free links (shared memory) and, unlike our threads,
no interpreter lock: what this runtime would do on 16 such cores. Placement: the paper's round robin (one
heavy node per device while there are at most 16), backward-first inboxes (the paper's appendix A). One
run per max_active_keys: the simulator is deterministic given the calibration (it varies between
invocations with this machine's load; ``calibration`` in the result keeps it). No peer on this backend
(PyTorch on 16 cores is not something this machine can measure).

The paper's ratios: the stored copies of the paper reachable from this project's tools (arXiv 1705.09786)
did not give Table 2's numbers, so ``paper_ratio`` is null except where issue 12 quotes the paper (the
BiLSTM tagger: 3.2x at max_active_keys 32 over 1, on 16 cores). Nothing is filled in from memory.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from amp_notebook.bench.common import interleaved_medians
from amp_notebook.reproduce.workloads import MODELS, Workload, available
from amp_notebook.runtime.autoplace import autoplace, measure_costs
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.train import TrainResult, train

MAX_ACTIVE_KEYS = (1, 4, 16, 32)
THREADS: dict[str, Any] = {"workers": 2, "priority": "fifo"}
QUICK_SEARCH: dict[str, Any] = {"keys": 8, "max_evaluations": 2}  # --quick: round robin or balanced, 8 keys
SIMULATED: dict[str, Any] = {"workers": 16, "priority": "backward_first", "placement": "round_robin"}
# max_active_keys -> the paper's throughput ratio over max_active_keys 1 (None: not found; module docstring)
PAPER_RATIO: dict[str, dict[int, float]] = {"bilstm-tagger": {32: 3.2}}
PAPER_SOURCE = (
    "issue 12 quotes the paper's BiLSTM tagger ratio (3.2x at max_active_keys 32 vs 1, 16 cores); the stored "
    "copies of arXiv 1705.09786 reachable here did not give Table 2's other numbers, so they are null"
)


def run(quick: bool = False, repeats: int = 3, seed: int = 0, models: Sequence[str] = MODELS) -> dict[str, Any]:
    """Every model on both backends; ``quick``: a few keys, one round (a smoke test)."""
    if quick:
        repeats = 1
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    calibration: dict[str, Any] = {}
    for w in available(models, quick, seed, notes):
        name = w.name
        _progress(f"table2: {name} ({w.layout}), {len(w.data.train)} keys")
        costs = measure_costs(w.graph, w.data, optimizer=w.optimizer, seed=seed)
        calibration[name] = {n: {k: v for k, v in c.__dict__.items() if v is not None} for n, c in costs.nodes.items()}
        rows += threads_rows(w, costs, repeats, seed, QUICK_SEARCH if quick else {})
        rows += simulated_rows(w, costs, seed)
        if w.peer is None:
            notes[name] = f"{name}: no PyTorch peer in this checkout yet"
    for name in [m for m in models if m in notes and not any(r["model"] == m for r in rows)]:  # missing models
        rows += [
            _row(name, backend, k, None, None, None) for backend in ("threads", "simulated") for k in MAX_ACTIVE_KEYS
        ]
    return {
        "rows": rows,
        "max_active_keys": list(MAX_ACTIVE_KEYS),
        "threads": {**THREADS, "placement": "auto", "repeats": repeats},
        "simulated": dict(SIMULATED),
        "calibration_s": calibration,
        "paper_source": PAPER_SOURCE,
        "notes": notes,
        "quick": quick,
    }


def _row(
    model: str, backend: str, mak: int, ours: float | None, base: float | None, peer: float | None, **extra: Any
) -> dict[str, Any]:  # fmt: skip
    return {
        "model": model, "backend": backend, "mak": mak, "ours_per_s": ours,
        "ours_ratio": ours / base if ours is not None and base else None,
        "paper_ratio": PAPER_RATIO.get(model, {}).get(mak, 1.0 if mak == 1 and model in PAPER_RATIO else None),
        "peer_per_s": peer, **extra,
    }  # fmt: skip


def _train(w: Workload, seed: int, **knobs: Any) -> TrainResult:
    with warnings.catch_warnings():  # 16 devices for a model with fewer heavy nodes leave some idle
        warnings.simplefilter("ignore", UserWarning)
        r = train(w.graph, w.data, mode="amp", epochs=1, validate=False, trace=False, seed=seed,
                  optimizer=w.optimizer, **{**w.settings, **knobs})  # fmt: skip
    assert isinstance(r, TrainResult)
    return r


def threads_rows(
    w: Workload, costs: CostModel, repeats: int, seed: int, search: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """This machine: each max_active_keys and the peer, ``repeats`` interleaved rounds, medians (``search``:
    extra arguments of the placement search)."""
    placements: dict[int, dict[str, int]] = {}
    for k in MAX_ACTIVE_KEYS:
        choice = autoplace(w.graph, w.data, max_active_keys=k, optimizer=w.optimizer, costs=costs, seed=seed,
                           min_update_frequency=w.settings.get("min_update_frequency", 1), **THREADS,
                           **(search or {}))  # fmt: skip
        placements[k] = choice.placement
        _progress(f"  threads, max_active_keys {k}: placement {choice.chosen.name} {choice.chosen.heavy}")

    def rate(k: int) -> Callable[[], float]:
        return lambda: _train(w, seed, max_active_keys=k, placement=placements[k], **THREADS).train_instances_per_s

    contenders: dict[str, Callable[[], float]] = {f"mak={k}": rate(k) for k in MAX_ACTIVE_KEYS}
    if w.peer is not None:
        contenders["peer"] = w.peer
    medians = interleaved_medians(repeats, contenders)
    peer = medians["peer"][0] if "peer" in medians else None
    base = medians["mak=1"][0]
    heavy = [n for n in w.graph.topological_order() if w.graph.nodes[n].kind in ("linear", "embedding")]
    rows = []
    for k in MAX_ACTIVE_KEYS:
        value, rounds = medians[f"mak={k}"]
        rows.append(_row(w.name, "threads", k, value, base, peer, runs_per_s=rounds,
                         peer_runs_per_s=medians["peer"][1] if peer is not None else None,
                         placement={n: placements[k][n] for n in heavy}))  # fmt: skip
        _progress(f"  threads, max_active_keys {k}: {value:,.0f} instances/s (rounds {[round(v) for v in rounds]})")
    if peer is not None:
        _progress(f"  {w.peer_name}: {peer:,.0f} instances/s")
    return rows


def simulated_rows(w: Workload, costs: CostModel, seed: int) -> list[dict[str, Any]]:
    """The paper's 16 cores, calibrated from this machine (module docstring): one run per max_active_keys."""
    rates = {k: _train(w, seed, max_active_keys=k, backend="simulated", costs=costs, **SIMULATED).train_instances_per_s
             for k in MAX_ACTIVE_KEYS}  # fmt: skip
    for k, v in rates.items():
        _progress(f"  simulated 16 cores, max_active_keys {k}: {v:,.0f} instances/s (virtual)")
    return [_row(w.name, "simulated", k, rates[k], rates[1], None) for k in MAX_ACTIVE_KEYS]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


__all__ = ["MAX_ACTIVE_KEYS", "PAPER_RATIO", "run", "simulated_rows", "threads_rows"]
