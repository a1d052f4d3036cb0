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
# # 06 · Staleness and convergence: the paper's Fig. 5 in miniature
#
# Asynchrony buys throughput with **staleness**. With `max_active_keys` keys in flight, a layer computes
# a key's forward pass with the weights it has *now*, and by the time that key's gradient comes back the
# layer may have updated several times: the gradient is *stale* by that many versions (the runtime measures
# it for every gradient). `min_update_frequency` says how many gradients a layer collects before it
# updates: a large value means few, well-averaged updates (little staleness in versions), a small value
# means many small updates (more staleness, noisier steps).
#
# The paper's Fig. 5 sweeps both knobs on an 8-replica RNN and reports epochs and time to 96% validation
# accuracy. Its finding: more keys in flight shorten an epoch until the devices are busy, after which they
# only add staleness, and `min_update_frequency` must be **"neither too large nor too small"**.
#
# Each point of that figure trains an 8-replica RNN on 100,000 lists for many epochs, so this notebook
# redoes it in miniature, in about a minute: the paper's 4-layer MLP, narrowed to 256 hidden units, on the
# 8x8 digits in keys of 10 images, on 4 simulated devices (one layer each) whose speed is one core of this
# project's machine. The simulated backend runs the real numpy math on a virtual clock, so every number
# below is exact and the same on any machine: turn the knobs and only the knobs change the result. The
# last section says where the full figure comes from.

# %%
import warnings

import numpy as np
import plotly.graph_objects as go

import amp_notebook as amp
from amp_notebook.data import load_digits_dataset
from amp_notebook.reproduce.fig5 import COSTS

warnings.simplefilter("ignore", UserWarning)
digits = load_digits_dataset(batch_size=10, seed=0)
graph = amp.models.mlp(input_width=64, hidden=256)
start = graph.init_params(0, np.dtype("float32"))  # every run starts from these weights
TARGET, MAX_EPOCHS = 0.93, 20
print(f"{len(digits.train)} training keys of 10 images, target {TARGET:.0%} validation accuracy")
print("each simulated device:", COSTS.spec())


# %% [markdown]
# ## One run, two knobs
#
# `run(max_active_keys, min_update_frequency)` trains until the validation accuracy reaches the target (or
# `MAX_EPOCHS` pass) and reports what the figure reports: epochs and (virtual) time to the target, plus the
# staleness the runtime measured. Momentum SGD with the same learning rate everywhere.


# %%
def run(max_active_keys: int, min_update_frequency: int) -> dict:
    curve = []

    def on_epoch(stats):
        curve.append((stats.val_accuracy, stats.end_s))
        return stats.val_accuracy >= TARGET  # stop at the target

    r = amp.train(graph, digits, workers=4, mode="amp", max_active_keys=max_active_keys,
                  min_update_frequency=min_update_frequency, optimizer={"name": "momentum", "lr": 0.02},
                  epochs=MAX_EPOCHS, backend="simulated", costs=COSTS, params=start, on_epoch=on_epoch)
    hit = next((i for i, (acc, _) in enumerate(curve) if acc >= TARGET), None)
    return {
        "max_active_keys": max_active_keys, "min_update_frequency": min_update_frequency,
        "epochs_to_target": None if hit is None else hit + 1,
        "ms_to_target": None if hit is None else round(1e3 * curve[hit][1], 1),
        "final_accuracy": round(curve[-1][0], 3), "staleness_mean": round(r.staleness()["mean"], 2),
        "epoch_ms": round(1e3 * curve[0][1], 2), "curve": curve,
    }


def show(row: dict) -> None:
    print({k: v for k, v in row.items() if k != "curve"})


show(run(max_active_keys=1, min_update_frequency=1))  # plain SGD: one key at a time, no staleness
show(run(max_active_keys=4, min_update_frequency=1))  # 4 keys in flight: shorter epochs, some staleness

# %% [markdown]
# With one key in flight the 4 devices take turns: an epoch is long, but there is no staleness. With 4
# keys in flight the devices overlap their work, an epoch is shorter, and each gradient is on average
# about one update stale. Try other values: in a live notebook the sliders below rerun the cell.

# %%
try:
    from ipywidgets import interact

    interact(lambda max_active_keys, min_update_frequency: show(run(max_active_keys, min_update_frequency)),
             max_active_keys=[1, 2, 4, 8, 16, 32], min_update_frequency=[1, 2, 4, 8, 16, 32, 64])
except ImportError:
    print("pip install ipywidgets for the sliders; call show(run(K, M)) instead")

# %% [markdown]
# ## The grid: Fig. 5 in miniature
#
# Nine runs, max_active_keys in {1, 4, 16} times min_update_frequency in {1, 4, 16}.

# %%
grid = [run(k, m) for k in (1, 4, 16) for m in (1, 4, 16)]
for row in grid:
    show(row)


# %%
def heatmap(field: str, title: str) -> go.Figure:
    ks, ms = [1, 4, 16], [1, 4, 16]
    z = [[next(r[field] for r in grid if r["max_active_keys"] == k and r["min_update_frequency"] == m) for m in ms]
         for k in ks]
    text = [["not reached" if v is None else str(v) for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=[str(m) for m in ms], y=[str(k) for k in ks], text=text,
                               texttemplate="%{text}", colorscale="Viridis"))
    fig.update_layout(title=title, xaxis_title="min_update_frequency", yaxis_title="max_active_keys", height=340,
                      xaxis_type="category", yaxis_type="category")
    return fig


heatmap("epochs_to_target", f"epochs to {TARGET:.0%}").show()
heatmap("ms_to_target", f"simulated milliseconds to {TARGET:.0%}").show()
heatmap("staleness_mean", "mean staleness (updates between a key's forward and its gradient)").show()

# %% [markdown]
# ## Reading the grid
#
# * **Down a column** (more keys in flight at a fixed update frequency) staleness grows about in
#   proportion to max_active_keys / min_update_frequency. An epoch gets shorter only until the 4 devices
#   are busy (compare `epoch_ms`): from 4 keys to 16 it barely shrinks, so past that point more keys buy
#   nothing but staleness.
# * **Along a row** the update frequency trades update count against staleness. With 16 keys in flight
#   and min_update_frequency 1, every gradient triggers an update, gradients arrive several versions
#   stale, and training diverges. With 4 the staleness drops to about one version and the run reaches the
#   target in the fewest epochs of its row; with 16 an epoch holds only a few dozen updates and the run
#   needs more epochs again. The rows of 4 keys show the same valley, less deep. That is the paper's
#   "neither too large nor too small": the update frequency must grow with the keys in flight, but not so
#   far that updates become rare.
# * **Time to target** is epochs times epoch length. Asynchrony pays where the shorter epochs outweigh
#   the extra epochs: 4 keys in flight with min_update_frequency 4 reach the target sooner than plain SGD
#   with one key, while 16 keys pay at no update frequency, because on 4 devices 4 keys already keep every
#   device busy. The paper's 16 cores and deeper pipelines move that point further out.
#
# The cell below checks each of these statements against the grid, so the text cannot drift from the
# numbers.

# %%
cell = {(r["max_active_keys"], r["min_update_frequency"]): r for r in grid}
epochs = {km: r["epochs_to_target"] for km, r in cell.items()}
ms = {km: r["ms_to_target"] for km, r in cell.items()}
for m in (1, 4, 16):  # down a column: staleness grows with the keys in flight
    assert cell[(1, m)]["staleness_mean"] < cell[(4, m)]["staleness_mean"] < cell[(16, m)]["staleness_mean"]
assert cell[(4, 4)]["epoch_ms"] < 0.5 * cell[(1, 4)]["epoch_ms"]  # 4 keys keep the 4 devices busy ...
assert cell[(16, 4)]["epoch_ms"] > 0.95 * cell[(4, 4)]["epoch_ms"]  # ... and 16 barely shorten an epoch more
assert epochs[(16, 1)] is None  # 16 keys, an update per gradient: never reaches the target
assert epochs[(16, 4)] < epochs[(16, 16)] and epochs[(4, 4)] < min(epochs[(4, 1)], epochs[(4, 16)])  # the valleys
assert ms[(4, 4)] < ms[(1, 1)]  # asynchrony pays: 4 keys, min_update_frequency 4, beat plain SGD
assert all(ms[(16, m)] is None or ms[(16, m)] > ms[(1, 1)] for m in (1, 4, 16))  # 16 keys never do
print("every statement above holds for this grid")

# %%
fig = go.Figure()
for row in grid:
    if row["min_update_frequency"] == 4:
        fig.add_scatter(x=[1e3 * t for _, t in row["curve"]], y=[a for a, _ in row["curve"]], mode="lines+markers",
                        name=f"max_active_keys {row['max_active_keys']}")
fig.add_hline(y=TARGET, line_dash="dot")
fig.update_layout(title="validation accuracy against simulated time (min_update_frequency 4)",
                  xaxis_title="simulated milliseconds", yaxis_title="validation accuracy", height=360)
fig.show()

# %% [markdown]
# ## Where the full figure comes from
#
# The paper's Fig. 5(b) trains the list-reduction RNN with its step replicated 8 times (replicas averaged
# at each epoch's end) on 100,000 lists, on its 16-core machine, and reports epochs and time to 96%
# validation accuracy over max_active_keys x min_update_interval. `amp-notebook reproduce fig5` runs that
# grid on this package's simulator, calibrated at one core of this project's machine, and its HTML report
# draws the same heatmaps as this notebook. Every point runs the real math, so the full grid takes hours on
# the Python engine: by default the command trains 20,000 lists for at most 20 epochs and also reports
# epochs and time to lower accuracies (50%, 60%, 70%); `--quick` runs a 2 x 2 grid in seconds, a smoke
# test. `amp-notebook reproduce table1` puts the time to target of the paper's other models beside its
# Table 1, and tutorial 07 shows what replicas change.
