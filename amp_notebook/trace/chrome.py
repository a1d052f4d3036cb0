"""Chrome trace event format, the JSON that Perfetto and chrome://tracing open.

One ``X`` (complete) slice per handled message (or bundle) on thread ``tid = worker + 1`` of process 1,
named after the node and phase, with the key and node in ``args`` (a bundle adds ``messages`` and the
``keys`` of its messages); ``M`` metadata names the process and threads;
``C`` counters give each worker's queue depth and the staleness of gradients. Times are microseconds.
Slices on one thread never overlap because a worker handles one message at a time; rounding to
microseconds could make neighbours touch, so each slice is clipped to end where the next begins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from amp_notebook.trace.trace import Trace

PID = 1


def chrome_trace(trace: Trace, counters: bool = True, window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The trace as a Chrome trace document; ``window=(start_s, end_s)`` keeps only slices starting in it."""
    ev = trace.events()
    if window is not None:
        keep = (ev["start"] >= window[0]) & (ev["start"] < window[1])
        ev = {name: col[keep] for name, col in ev.items()}
    out: list[dict[str, Any]] = [
        {"ph": "M", "pid": PID, "tid": 0, "name": "process_name", "args": {"name": "amp_notebook"}},
    ]
    for w in range(trace.workers):
        out.append({"ph": "M", "pid": PID, "tid": w + 1, "name": "thread_name", "args": {"name": f"worker {w}"}})
        out.append({"ph": "M", "pid": PID, "tid": w + 1, "name": "thread_sort_index", "args": {"sort_index": w}})
    names = trace.node_names
    bundle_keys = trace.bundle_keys()
    for w in range(trace.workers):
        mine = np.nonzero(ev["worker"] == w)[0]
        starts = np.round(ev["start"][mine] * 1e6, 3)
        ends = np.round(ev["end"][mine] * 1e6, 3)
        if len(mine) > 1:
            ends[:-1] = np.minimum(ends[:-1], starts[1:])
        last_depth = -1
        for j, i in enumerate(mine):
            phase = trace.phases[ev["phase"][i]]
            node = names[ev["node"][i]]
            args: dict[str, Any] = {"node": node, "key": int(ev["key"][i]), "phase": phase}
            if ev["messages"][i] > 1:
                args["messages"] = int(ev["messages"][i])
                keys = bundle_keys.get((w, int(ev["row"][i])))
                if keys is not None:
                    args["keys"] = keys
            out.append(
                {
                    "ph": "X", "pid": PID, "tid": w + 1, "name": f"{node} {phase}", "cat": phase,
                    "ts": float(starts[j]), "dur": float(max(ends[j] - starts[j], 0.0)), "args": args,
                }
            )  # fmt: skip
            depth = int(ev["depth"][i])
            if counters and depth != last_depth:  # a counter holds its value until it changes
                last_depth = depth
                out.append(
                    {
                        "ph": "C", "pid": PID, "tid": w + 1, "name": f"queue depth worker {w}",
                        "ts": float(starts[j]), "args": {"depth": depth},
                    }
                )  # fmt: skip
    if counters:
        st = trace.staleness()
        if window is not None:
            keep = (st["time"] >= window[0]) & (st["time"] < window[1])
            st = {name: col[keep] for name, col in st.items()}
        for i in range(len(st["time"])):
            out.append(
                {
                    "ph": "C", "pid": PID, "tid": 0, "name": f"staleness {names[st['node'][i]]}",
                    "ts": float(round(st["time"][i] * 1e6, 3)), "args": {"staleness": int(st["value"][i])},
                }
            )  # fmt: skip
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(doc: dict[str, Any], path: str | Path) -> None:
    with open(path, "w") as f:
        json.dump(doc, f)
