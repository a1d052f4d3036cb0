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
# train. We ask for many epochs and stop the run ourselves at the end.

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
# With few keys in flight the workers wait for each other; let more keys in and they overlap their work,
# while gradients arrive computed with weights that have since been updated: their **staleness** (the
# node's version at backward minus its version at forward) grows. Watch the Gantt fill in and the
# histograms spread as this cell runs; the numbers below are measured over a short window after each
# change.
#
# Staleness is not zero even with one key in flight here: this RNN's `step` node handles every time step
# of a sequence, so it receives several gradients per key and, updating after each one, the later
# gradients of a key were computed before the earlier ones were applied.


# %%
def measure(run: amp.Run, seconds: float = 2.0) -> dict[str, float]:
    """Throughput and mean staleness over the next ``seconds`` of a live run (rows written meanwhile)."""
    cursor = run.trace.since().cursor
    before = run.status
    time.sleep(seconds)
    after = run.status
    new = run.trace.since(cursor)
    staleness = new.staleness["value"]
    return {
        "instances/s": (after["train_instances_done"] - before["train_instances_done"])
        / (after["elapsed_s"] - before["elapsed_s"]),
        "mean staleness": float(np.mean(staleness)) if len(staleness) else 0.0,
    }


rows = []
for k in (1, 8):
    run.set_max_active_keys(k)
    time.sleep(0.3)  # let the pipeline fill (or drain) to the new limit
    rows.append({"max_active_keys": k, **measure(run)})
for r in rows:
    print(f"max_active_keys={r['max_active_keys']:>2}: {r['instances/s']:8,.0f} instances/s, "
          f"mean staleness {r['mean staleness']:.2f}")  # fmt: skip

# %% [markdown]
# Compare the two lines: staleness grows several-fold with the keys in flight. Throughput usually rises
# too (tutorial 01 and `amp-notebook bench rnn-vs-torch` measure it over whole runs); over two seconds on
# a shared two-core machine the difference can be small. `min_update_frequency` is the other knob: a node
# that waits for more gradients updates less often, so each gradient is less stale, but the model learns
# from older weights for longer. Try the slider in the dashboard, or:

# %%
run.set_min_update_frequency(None, 20)  # every parameterized node; or name one node
print(run.status["min_update_frequency"])
print(measure(run, 1.5))

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
path = save_trace(run.trace, out / "watch.npz")
run.trace.to_chrome(out / "watch.json")  # open in https://ui.perfetto.dev
Dashboard.replay(path)

# %% [markdown]
# ## Synchronous vs asynchronous, one time axis
#
# Two short runs of the same graph and data: `sync` (one key at a time, update after each) and `amp`
# (four keys in flight, local updates). Shown one above the other, sync's workers take turns while amp's
# overlap: the paper's Fig. 1 (a) against (c), measured on this machine.

# %%
small = list_reduction_dataset(n_train=600, n_val=50, seed=1)
results = {
    mode: amp.train(graph, small, workers=2, mode=mode, max_active_keys=4, epochs=1, validate=False, seed=0)
    for mode in ("sync", "amp")
}
for mode, r in results.items():
    print(f"{mode:>4}: {r.train_instances_per_s:8,.0f} instances/s, staleness {r.staleness()}")
Dashboard.compare(results["sync"], results["amp"], labels=("sync", "amp"))

# %% [markdown]
# ## A report to keep
#
# `report()` gathers plotly figures (learning curves, worker activity, staleness, utilization) and a
# summary table; `write_html` makes one self-contained file to share.

# %%
report_path = out / "watch_report.html"
run.report().write_html(report_path)
print(f"{report_path.name}: {report_path.stat().st_size / 1e6:.1f} MB")
