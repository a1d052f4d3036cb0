"""What-if questions on simulated hardware: "what would this graph do on N devices of F FLOP/s linked at B?".

:func:`whatif` trains a graph on the simulated backend (real math, virtual time) and reports what the
paper reports for hardware it did not have: training throughput (instances per virtual second), each
device's utilization, the link bandwidth the run used (bits moved between devices / makespan; also the
busiest directed link's share), gradient staleness and the training curve. :func:`sweep` repeats it over
a grid of ``max_active_keys`` x ``min_update_frequency``, the paper's Fig. 5.

Throughput of a chain of S equal stages (each f forward + b backward per key, c = f + b, update time u,
n keys; derived in ``tests/runtime/test_simulated.py`` and checked there against the simulator to the last bit):

* ``sync`` handles one key at a time: ``T = n (S c + u)``;
* ``pipeline`` with m keys in flight, then a flush: the last stage receives the first forward after
  (S - 1) f, then with backward-first priority never idles through the group's m (f + b) of work, and
  the last backward needs (S - 1) b to drain back to the first stage, so a group takes
  ``(S - 1) f + m c + (S - 1) b + u = (m + S - 1) c + u`` and the gain over sync is
  ``G(m) = m (S c + u) / ((m + S - 1) c + u)``, which is ``m S / (m + S - 1)`` for free updates: it tends
  to S only as m grows, and every flush pays the fill and drain again;
* ``amp`` never drains: once the pipe is full every stage handles a key per ``c + u / M``
  (M = min_update_frequency), given enough keys in flight to keep each stage fed while a neighbour
  updates. A stage sends its gradient on before running its own update, so only the last update lies on
  the first key's path: with enough keys in flight ``T = S c + u + (n - 1)(c + u)`` for M = 1, and the
  gain ``n (S c + u) / (S c + u + (n - 1)(c + u))`` approaches ``(S c + u) / (c + u)``, close to S.

:func:`ggsnn_like` and :func:`appendix_c` redo the paper's appendix-C estimate for a GGSNN on 1 TFLOPS
devices with an equivalent graph of Linear nodes (see their docstrings for how it compares).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import SettingError
from amp_notebook.ir.graph import Graph
from amp_notebook.optim import DEFAULT_OPTIMIZER
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.launch import simulate
from amp_notebook.runtime.result import TrainResult


@dataclass
class WhatIf:
    """One simulated run: throughput, utilization, bandwidth and staleness (all in virtual time)."""

    devices: int
    mode: str
    max_active_keys: int
    min_update_frequency: int
    throughput_per_s: float
    keys_per_s: float
    makespan_s: float
    utilization: list[float]
    bandwidth_bits_per_s: float
    busiest_link_bits_per_s: float
    staleness: dict[str, float]
    messages: int
    train_loss: list[float]
    val_accuracy: list[float | None]
    costs: dict[str, Any]
    result: TrainResult = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: everything but the full TrainResult."""
        return {k: v for k, v in self.__dict__.items() if k != "result"}


def whatif(
    graph: Graph,
    data: Dataset,
    *,
    devices: int = 4,
    flops: float | Sequence[float] | None = None,
    bandwidth: float | None = None,
    latency: float | None = None,
    overhead: float | None = None,
    wire_dtype: str | None = None,
    costs: CostModel | None = None,
    mode: str = "amp",
    max_active_keys: int = 4,
    min_update_frequency: int = 1,
    epochs: int = 1,
    optimizer: Any = DEFAULT_OPTIMIZER,
    seed: int = 0,
    validate: bool = False,
    placement: dict[str, int] | None = None,
    params: dict[str, dict[str, np.ndarray]] | None = None,
    trace: bool = True,
) -> WhatIf:
    """Train ``graph`` on ``data`` on ``devices`` simulated devices and report what the hardware would do.

    ``costs`` is the base cost model (default: the paper's 1 TFLOPS device with free links); ``flops``
    (FLOP/s per device), ``bandwidth`` (bits/s per link), ``latency`` (s per link), ``overhead`` (s per
    message) and ``wire_dtype`` change single fields of it. Validation keys are off by default so that
    throughput counts training only; pass ``validate=True`` for accuracy.
    """
    base = costs if costs is not None else CostModel()
    changes: dict[str, Any] = {}
    for name, value in (("flops", flops), ("bandwidth_bits_per_s", bandwidth), ("latency_s", latency),
                        ("message_overhead_s", overhead), ("wire_dtype", wire_dtype)):  # fmt: skip
        if value is not None:
            changes[name] = value
    model = base.with_(**changes) if changes else base
    r = simulate(
        graph, data, costs=model, params=params, workers=devices, mode=mode, max_active_keys=max_active_keys,
        min_update_frequency=min_update_frequency, optimizer=optimizer, epochs=epochs, seed=seed,
        validate=validate, placement=placement if placement is not None else "round_robin", trace=trace,
    )  # fmt: skip
    return summarize(r, model, train_keys=epochs * len(data.train))


def summarize(r: TrainResult, model: CostModel, train_keys: int) -> WhatIf:
    """A simulated TrainResult as a :class:`WhatIf` (``train_keys``: training keys the run completed)."""
    stats = r.backend_stats
    st = r.staleness()
    makespan = r.wall_s
    c = r.config
    return WhatIf(
        devices=c.workers,
        mode=c.mode,
        max_active_keys=1 if c.mode == "sync" else c.max_active_keys,
        min_update_frequency=c.min_update_frequency,
        throughput_per_s=r.train_instances_per_s,
        keys_per_s=train_keys / makespan if makespan > 0 else 0.0,
        makespan_s=makespan,
        utilization=r.utilization(),
        bandwidth_bits_per_s=stats["bandwidth_bits_per_s"],
        busiest_link_bits_per_s=stats["busiest_link_bits_per_s"],
        staleness={"mean": st["mean"], "p95": st["p95"], "max": st["max"]},
        messages=stats["messages"],
        train_loss=[e.train_loss for e in r.history],
        val_accuracy=r.val_accuracy,
        costs=model.spec(),
        result=r,
    )


def sweep(
    graph: Graph,
    data: Dataset,
    max_active_keys: Iterable[int] = (1, 2, 4, 8),
    min_update_frequency: Iterable[int] = (1, 2, 4, 8),
    **kwargs: Any,
) -> list[WhatIf]:
    """:func:`whatif` over the grid ``max_active_keys`` x ``min_update_frequency`` (the paper's Fig. 5).

    Every point starts from the same parameters (``graph.init_params(seed)``) so that only the two knobs
    differ. Returns the runs in row-major order (max_active_keys outer).
    """
    seed = kwargs.get("seed", 0)
    if "params" not in kwargs:
        kwargs["params"] = graph.init_params(seed, np.dtype("float32"))
    ks, ms = list(max_active_keys), list(min_update_frequency)
    if not ks or not ms:
        raise SettingError(
            "max_active_keys" if not ks else "min_update_frequency",
            f"sweep: expected non-empty grids, got max_active_keys={ks}, min_update_frequency={ms}",
        )
    return [whatif(graph, data, max_active_keys=k, min_update_frequency=m, **kwargs) for k in ks for m in ms]


def grid(runs: list[WhatIf], metric: str = "throughput_per_s") -> tuple[list[int], list[int], np.ndarray]:
    """(max_active_keys values, min_update_frequency values, metric matrix) from :func:`sweep`'s runs.

    ``metric`` is a WhatIf field holding a number, or ``final_train_loss``.
    """
    ks = sorted({r.max_active_keys for r in runs})
    ms = sorted({r.min_update_frequency for r in runs})
    out = np.full((len(ks), len(ms)), np.nan)
    for r in runs:
        value = r.train_loss[-1] if metric == "final_train_loss" else getattr(r, metric)
        out[ks.index(r.max_active_keys), ms.index(r.min_update_frequency)] = float(value)
    return ks, ms, out


# ------------------------------------------------------------------ the paper's appendix C


def ggsnn_like(hidden: int = 200, steps: int = 4) -> Graph:
    """A GGSNN-shaped graph of Linear nodes: ``steps`` rounds of message passing and a GRU-like update.

    One key is one graph of N nodes; its node states are a payload of shape (N, H). Each round (a loop
    with Phi, Isu and Cond, so the weights are shared over rounds as in a GGSNN):

    * ``messages``: Linear(H, H) over the E edge rows. A GGSNN multiplies each edge by the H x H matrix of
      its type; with E = N and the four types folded into one node the FLOPs are the same (2 E H^2
      forward), only the update touches H^2 instead of 4 H^2 parameters (under 1% of the node's work);
    * ``gates``: Linear(2H, 2H) on [messages, h], sigmoid, split into z and r;
    * ``candidate``: Linear(2H, H) on [messages, r * h], tanh; the new state is ``h + z * candidate``
      (a GRU's ``(1 - z) h + z h~`` needs a constant this IR does not have; the FLOPs are the same to
      within the elementwise terms).

    A Linear(H, 1) ``readout`` per node and an MSE loss end the key.
    """
    g = Graph("ggsnn_like")
    h0 = g.isu(g.input("h", width=hidden), forward={"t": "0"}, backward={"t": None}, name="start")
    h = g.phi(h0, None, name="loop")
    hb = g.bcast(h, 4, name="h_fanout")
    m = g.linear(hb[0], hidden, name="messages")
    mb = g.bcast(m, 2, name="m_fanout")
    gates = g.sigmoid(g.linear(g.concat(mb[0], hb[1], name="gates_in"), 2 * hidden, name="gates"), name="gates_act")
    z, r = g.split(gates, [hidden, hidden], name="z_r")
    rh = g.mul(r, hb[2], name="reset")
    cand_in = g.concat(mb[1], rh, name="candidate_in")
    cand = g.tanh(g.linear(cand_in, hidden, name="candidate"), name="candidate_act")
    new_h = g.add(g.mul(z, cand, name="update_gate"), hb[3], name="new_h")
    ticked = g.isu(new_h, forward={"t": "t + 1"}, backward={"t": "t - 1"}, name="tick")
    again, finished = g.cond(ticked, f"t < {steps}", name="more")
    g.connect(again, "loop", "in1")
    g.mse(g.linear(finished, 1, name="readout"), g.input("target", width=1), name="loss", match_on=("key",))
    return g


def ggsnn_like_dataset(keys: int = 64, nodes: int = 30, hidden: int = 200, seed: int = 0) -> Dataset:
    """Random node annotations (nodes, hidden) and per-node regression targets, one graph per key."""
    rng = np.random.default_rng(seed)
    batches = [
        Batch({"h": rng.standard_normal((nodes, hidden)) * 0.1, "target": rng.standard_normal((nodes, 1))}, 1)
        for _ in range(keys)
    ]
    return Dataset("ggsnn_like", batches, [])


# Message passing on device 0, everything else (the GRU-like update, the loop, the readout) on device 1:
# the split that keeps link traffic to the node states crossing once per round each way.
GGSNN_PLACEMENT: dict[str, int] = {
    "messages": 0, "m_fanout": 1, "readout": 1, "loss": 1, "target": 1,
    "h": 1, "start": 1, "loop": 1, "h_fanout": 1, "gates_in": 1, "gates": 1, "gates_act": 1, "z_r": 1,
    "reset": 1, "candidate_in": 1, "candidate": 1, "candidate_act": 1, "update_gate": 1, "new_h": 1, "tick": 1,
    "more": 1,
}  # fmt: skip

PAPER_APPENDIX_C = {"throughput_per_s": 6.5e3, "bandwidth_bits_per_s": 1.2e9}


def appendix_c(
    hidden: int = 200,
    nodes: int = 30,
    steps: int = 4,
    flops: float = 1e12,
    keys: int = 64,
    max_active_keys: int = 8,
    wire_dtype: str = "float32",
) -> dict[str, Any]:
    """The appendix-C estimate redone on the simulator: GGSNN-like graph, 1 TFLOPS devices, free links.

    Returns the simulated throughput (graphs per second), the bandwidth of the busiest directed link and of
    all links together, the analytic FLOPs of the busiest device per graph, and the paper's figures.
    The paper's 1.2 Gb/s is its throughput times one N x H float32 matrix per graph (6.5e3 * 30 * 200 * 32
    bits = 1.25e9): the node states crossing a link once. A training run moves them across each link once
    per round and direction, forward and backward, 2 * steps times per graph, which is what the simulator
    counts; ``node_state_crossings_per_link`` reports that ratio.
    """
    g = ggsnn_like(hidden, steps)
    data = ggsnn_like_dataset(keys, nodes, hidden)
    run = whatif(
        g, data, devices=2, flops=flops, wire_dtype=wire_dtype, mode="amp", max_active_keys=max_active_keys,
        placement=GGSNN_PLACEMENT, costs=CostModel.tflops_device(), optimizer={"name": "sgd", "lr": 1e-3},
    )  # fmt: skip
    matrix_bits = nodes * hidden * 8 * {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[wire_dtype]
    per_graph_bits = run.busiest_link_bits_per_s / run.throughput_per_s if run.throughput_per_s else math.nan
    gru_flops = steps * 6 * nodes * (2 * hidden * 2 * hidden + 2 * hidden * hidden)
    return {
        "throughput_per_s": run.throughput_per_s,
        "busiest_link_bits_per_s": run.busiest_link_bits_per_s,
        "bandwidth_bits_per_s": run.bandwidth_bits_per_s,
        "utilization": run.utilization,
        "node_state_crossings_per_link": per_graph_bits / matrix_bits,
        "busiest_device_flops_per_graph": gru_flops,
        "analytic_throughput_per_s": flops / gru_flops,
        "paper": dict(PAPER_APPENDIX_C),
        "settings": {"hidden": hidden, "nodes": nodes, "edges": nodes, "edge_types": 4, "steps": steps,
                     "flops": flops, "devices": 2, "max_active_keys": max_active_keys, "wire_dtype": wire_dtype},
        "run": run,
    }  # fmt: skip


__all__ = [
    "GGSNN_PLACEMENT", "PAPER_APPENDIX_C", "WhatIf", "appendix_c", "ggsnn_like", "ggsnn_like_dataset", "grid",
    "summarize", "sweep", "whatif",
]  # fmt: skip
