"""Per-message cost of the runtime on each engine: a chain of no-op nodes split over 2 workers.

The graph is :func:`~amp_notebook.runtime.costs.noop_chain`: Input -> Linear(1, 1) -> 16 Identity nodes ->
MSE, on keys of one instance of width 1, so almost all the time goes to the runtime's own glue: taking a
message, running a trivial op, tracing it, counting credits and routing to the next worker. Identity nodes
alternate between the two workers so every hop crosses threads (the worst case). One message per call
(``max_bundle`` 1: ``bench bundling`` measures bundles) and plain SGD at lr 0.01 for the Linear node's
updates (the optimizer's own arithmetic is not the runtime's glue, and a fixed one keeps the figure
comparable across versions; at lr 0.1, 16 keys of stale gradients on random targets can diverge within a
few thousand keys). Figure: wall time / messages handled.

Both engines run the same chain in the same process, interleaved with the order flipped every round:
``us_per_message`` is the Python engine's (the figure this benchmark has always reported),
``us_per_message_native`` the native engine's (None where the native engine is not built, with the reason in
``native_unavailable``). Every round is kept, and the machine's load beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_notebook.bench.common import constant_dataset, interleaved_medians, load_line, machine_load, report
from amp_notebook.runtime.costs import noop_chain
from amp_notebook.runtime.train import train

chain = noop_chain  # the name other benchmarks and tutorial 08 import

SETTINGS: dict[str, Any] = {"mode": "amp", "max_active_keys": 16, "validate": False, "dtype": "float64",
                            "max_bundle": 1, "optimizer": {"name": "sgd", "lr": 0.01}}  # fmt: skip


# Keys per run: 10,000 keys, 39 trace rows each (21 forward, 17 backward, 1 update). The native engine runs them
# in about 0.15 s; at 2,000 keys its runs lasted 20-30 ms, and starting and ending a run weighed on the figure.
KEYS = 10_000


def run(repeats: int = 5, keys: int = KEYS, chain_workers: int = 2, quick: bool = False) -> dict[str, Any]:
    from amp_notebook import engine as native_engine

    if quick:
        repeats, keys = 3, 300
    g = noop_chain(workers=chain_workers)
    data = constant_dataset(keys, 1)
    load_before = machine_load()["after"]

    def per_message(engine: str) -> Callable[[], float]:
        def once() -> float:
            r = train(g, data, workers=chain_workers, engine=engine, **SETTINGS)
            return r.wall_s / len(r.trace.events()["end"]) * 1e6

        return once

    sides = {"python": per_message("python")}
    if native_engine.available():
        sides["native"] = per_message("native")
    medians = interleaved_medians(repeats, sides)
    us, values = medians["python"]
    native_us, native_values = medians.get("native", (None, []))
    load = machine_load(load_before)
    result: dict[str, Any] = {
        "us_per_message": us, "repeats_us": values,
        "us_per_message_native": native_us, "repeats_us_native": native_values,
        "python_over_native": us / native_us if native_us else None,
        "workers": chain_workers, "keys": keys, "nodes": len(g.nodes), "repeats": repeats, "load_average_1min": load,
    }  # fmt: skip
    rows: list[tuple[str, Any]] = [
        ("Python engine: us per message (median)", f"{us:.2f}"),
        ("  rounds", [round(v, 2) for v in values]),
    ]
    if native_us is None:
        result["native_unavailable"] = native_engine.status().get("reason")
        rows.append(("native engine", f"not available ({result['native_unavailable']})"))
    else:
        rows += [("native engine: us per message (median)", f"{native_us:.2f}"),
                 ("  rounds", [round(v, 2) for v in native_values]),
                 ("Python / native", f"{us / native_us:.1f}x")]  # fmt: skip
    rows += [("runs", f"{repeats} per engine, interleaved, order flipped every round"), load_line(load)]
    print(report(rows))
    return result
