# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Watch asynchrony happen
#
# In tutorial 01 we trained the paper's variable-length RNN and read throughput and staleness from the
# result *after* the run. Here we watch a run **while it trains**: a background run returns at once with a
# `Run` handle, and `Dashboard(run)` streams what every worker does into the notebook:
#
# * the **Gantt chart**: one lane per worker, one box per message handled, coloured like the paper's
#   Fig. 1 (forward orange, backward blue, parameter update yellow). Hover a box for its node, key,
#   duration and, for a backward box, the staleness of the gradient it carried. Wheel to zoom, drag to pan,
#   tick *follow* to ride the newest time again.
# * **queue depth** per worker and **keys in flight** over time, **loss and accuracy**, and a **staleness
#   histogram** per parameterized node;
# * **controls**: pause, resume, stop, and sliders for `max_active_keys` and `min_update_frequency` that
#   change the running training, no restart.
#
# Then we turn those knobs from Python and measure what they do, save the trace, replay it, and compare
# a synchronous run with an asynchronous one on one time axis.

# %%
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import amp_notebook as amp
from amp_notebook.data import list_reduction_dataset
from amp_notebook.trace.io import save_trace
from amp_notebook.ui import Dashboard

out = Path(tempfile.mkdtemp(prefix="amp_tutorial03_"))  # files this notebook writes

# %% [markdown]
# ## Start a run in the background
#
# `background=True` makes `train` return a `Run` at once; the kernel stays free while two worker threads
# train. We ask for many epochs and stop the run ourselves at the end. The workers run on the native engine
# when it is built (the default): C++ threads that hold no Python lock while they work, so the notebook's
# Python stays responsive and the two workers can use two cores.

# %%
data = list_reduction_dataset(n_train=4000, n_val=200, seed=0)
graph = amp.models.rnn()
run = amp.train(graph, data, background=True, workers=2, mode="amp", max_active_keys=1, epochs=1000,
                optimizer={"name": "adam", "lr": 1e-3}, seed=0)  # fmt: skip
run

# %% [markdown]
# ## Open the dashboard
#
# It updates four times a second from binary column buffers: only the rows written since the last update
# travel, and the browser keeps a bounded window of them, so a long run costs the same as a short one.

# %%
dash = Dashboard(run, window_s=3.0)
dash

# %% [markdown]
# ## Turn `max_active_keys` while it trains
#
# With few keys in flight the workers wait for each other; let more keys in and they can overlap their
# work, while gradients arrive computed with weights that have since been updated: their **staleness** (the
# node's version at backward minus its version at forward) grows. Watch the Gantt fill in and the
# histograms spread as this cell runs.
#
# The cell measures each setting over short windows of the live run: three rounds, the settings
# alternating (1, 8, then 8, 1, then 1, 8), because the load of a shared machine drifts; it prints every
# round and the median. Staleness is not zero even with one key in flight here: this RNN's `step` node
# handles every time step of a sequence, so it receives several gradients per key and, updating after each
# one, the later gradients of a key were computed before the earlier ones were applied.


# %%
def measure(run: amp.Run, seconds: float = 1.0) -> dict[str, float]:
    """Training throughput, updates per second and mean staleness over the next ``seconds`` of a live run."""
    cursor = run.trace.since().cursor
    before = run.status
    time.sleep(seconds)
    after = run.status
    new = run.trace.since(cursor)
    elapsed = after["elapsed_s"] - before["elapsed_s"]
    staleness = new.staleness["value"]
    return {
        "instances/s": (after["train_instances_done"] - before["train_instances_done"]) / elapsed,
        "updates/s": float(np.sum(new.events["phase"] == 2)) / elapsed,
        "mean staleness": float(np.mean(staleness)) if len(staleness) else 0.0,
    }


def interleaved(setter, values, rounds: int = 3) -> dict:
    """Measure each value of a live knob in ``rounds`` rounds, alternating the order; value -> measurements."""
    out = {v: [] for v in values}
    for r in range(rounds):
        for v in values if r % 2 == 0 else values[::-1]:
            setter(v)
            time.sleep(0.3)  # let the pipeline fill (or drain) to the new setting
            out[v].append(measure(run))
    return out


def med(results: dict, value: int, figure: str = "instances/s") -> float:
    """The median of one figure over the rounds of one knob value."""
    return float(np.median([m[figure] for m in results[value]]))


def show(name: str, results: dict) -> None:
    first = float(np.median([m["instances/s"] for m in next(iter(results.values()))]))
    for v, ms in results.items():
        rates = [m["instances/s"] for m in ms]
        print(f"{name}={v:>2}: rounds {', '.join(f'{x:,.0f}' for x in rates)} instances/s, median "
              f"{np.median(rates):,.0f} ({np.median(rates) / first:.2f}x); updates/s "
              f"{np.median([m['updates/s'] for m in ms]):,.0f}; mean staleness "
              f"{np.median([m['mean staleness'] for m in ms]):.2f}")


by_keys = interleaved(run.set_max_active_keys, (1, 8))
show("max_active_keys", by_keys)
assert med(by_keys, 8, "mean staleness") > med(by_keys, 1, "mean staleness")

# %% [markdown]
# Staleness grows with the keys in flight (asserted on the medians above). With one key in flight a
# worker waits whenever that key's next message is on the other worker; with eight, it usually has another
# key's message to run, and messages of different keys waiting for the same node run as one call
# (bundling). The rounds show what that bought here and how much they scatter: the machine's load moves
# them (tutorial 01 measures the same over whole runs, with the load printed).
#
# `min_update_frequency` is the other knob: a node that waits for more gradients updates less often, so
# each gradient is less stale, and every update skipped is an optimizer step not paid for: with 8 keys in
# flight, compare an update after every gradient with an update after 20 (the same rounds):

# %%
run.set_max_active_keys(8)
by_frequency = interleaved(lambda m: run.set_min_update_frequency(None, m), (1, 20))  # None: every node
show("min_update_frequency", by_frequency)
print(run.status["min_update_frequency"])
assert med(by_frequency, 20, "updates/s") < med(by_frequency, 1, "updates/s")
assert med(by_frequency, 20, "mean staleness") < med(by_frequency, 1, "mean staleness")

# %% [markdown]
# Fewer updates per second and less staleness, as the knob promises (both asserted on the medians). Every
# update skipped is an Adam step over the layer's weights not paid for, so skipped updates can also show in
# throughput. Which of the two knobs bought more throughput here? The medians, side by side:

# %%
print(f"8 keys in flight instead of 1: {med(by_keys, 8) / med(by_keys, 1):.2f}x the throughput; "
      f"an update after 20 gradients instead of 1: {med(by_frequency, 20) / med(by_frequency, 1):.2f}x "
      f"(medians of 3 rounds)")

# %% [markdown]
# What fewer updates cost is learning: fewer steps, from older weights; tutorials 02 and 06 show both
# sides on the simulator, where every figure is exact. Try the sliders in the dashboard.

# %% [markdown]
# Pause holds new forward work (backward work in flight drains, so no gradient is lost) and resume goes on.
# The dashboard's buttons do the same.

# %%
run.pause()
time.sleep(0.5)
held = run.status["keys_in_flight"]
run.resume()
print(f"paused with {held} keys held in flight; state now {run.state!r}")

# %% [markdown]
# ## Stop, save and replay
#
# `stop()` admits no more keys and returns once the keys in flight have finished and every thread is
# joined. The trace can be saved (`.npz`, exact) or exported for Perfetto (`.json`), and any saved trace
# opens again in the same widget with a time slider: press *Play* to watch the run again.

# %%
run.stop()
print(run)
print("engine:", run.result.engine, "| nodes run through Python:", list(run.result.python_nodes) or "none")
path = save_trace(run.trace, out / "watch.npz")
run.trace.to_chrome(out / "watch.json")  # open in https://ui.perfetto.dev
Dashboard.replay(path)

# %% [markdown]
# ## Synchronous vs asynchronous, one time axis
#
# Runs of the same graph, data, optimizer and epoch, only the mode differs: `sync` (one key at a time, every
# node updates after each) and `amp` (four keys in flight, local updates); three rounds each, alternating.
# The last pair is shown one above the other on one time axis: the paper's Fig. 1 (a) against (c),
# measured on this machine. The sum of the two workers' utilizations is how many workers were busy on
# average; work that overlaps raises it.

# %%
small = list_reduction_dataset(n_train=2000, n_val=50, seed=1)
modes: dict[str, list[amp.TrainResult]] = {"sync": [], "amp": []}
for r in range(3):
    for mode in ("sync", "amp") if r % 2 == 0 else ("amp", "sync"):
        modes[mode].append(amp.train(graph, small, workers=2, mode=mode, max_active_keys=4, epochs=1, validate=False,
                                     seed=0))  # fmt: skip
for mode, rs in modes.items():
    rates = [r.train_instances_per_s for r in rs]
    print(f"{mode:>4}: rounds {', '.join(f'{x:,.0f}' for x in rates)} instances/s (median {np.median(rates):,.0f}); "
          f"workers busy on average {np.median([sum(r.utilization()) for r in rs]):.2f}; mean staleness "
          f"{np.median([r.staleness()['mean'] for r in rs]):.2f}")
gain = np.median([r.train_instances_per_s for r in modes["amp"]]) / np.median(
    [r.train_instances_per_s for r in modes["sync"]]
)
print(f"amp ran {gain:.2f}x the throughput of sync (medians), with {os.getloadavg()[0]:.1f} threads wanting a core "
      f"on average over the last minute (load average; {len(os.sched_getaffinity(0))} cores)")
Dashboard.compare(modes["sync"][-1], modes["amp"][-1], labels=("sync", "amp"))

# %% [markdown]
# ## A report to keep
#
# `report()` gathers plotly figures (learning curves, worker activity, staleness, utilization) and a
# summary table; `write_html` makes one self-contained file to share.

# %%
report_path = out / "watch_report.html"
run.report().write_html(report_path)
print(f"{report_path.name}: {report_path.stat().st_size / 1e6:.1f} MB")
