# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Sync, pipeline, AMP: the paper's Fig. 1 on simulated hardware
#
# AMPNet is about networks of devices we do not have on a laptop. The **simulated backend** runs the
# same graph, placement, controller and worker state machines as the threaded runtime, but on a
# *virtual clock*: each message takes the time the **cost model** says it would take on the simulated
# device, and messages between devices take the link's latency plus bytes / bandwidth. The numpy math
# still runs (training is real), only time is virtual, so every run is exact and reproducible: a good
# place to look at *schedules*.
#
# We redo the paper's Fig. 1 for a 4-layer MLP on 4 simulated devices, one layer per device:
#
# * **(a) synchronous**: one key at a time goes forward through the 4 devices and back, then all layers
#   update; at any moment only one device works;
# * **(b) pipeline parallel**: up to `max_active_keys` keys enter back to back, the pipeline fills, drains,
#   and a *flush* updates all layers together before the next group;
# * **(c) asynchronous model parallel (AMP)**: keys keep entering while others are in flight, and each
#   layer updates *itself* as soon as it holds `min_update_frequency` gradients: no flush, no drain.

# %%
import numpy as np
import plotly.graph_objects as go

import amp_notebook as amp
from amp_notebook.data import Dataset, load_digits_dataset

# %% [markdown]
# ## A stylised cost model, as in the figure
#
# Fig. 1 draws every layer with the same box sizes. A `CostModel` can fix the handling time of single
# nodes (`NodeCost`); here every Linear takes 1 µs forward, 2 µs backward (appendix C: the backward pass
# computes the weight gradient *and* the input gradient, twice the forward FLOPs) and 0.5 µs to update.
# Everything else (ReLU, the loss) costs nothing and links are free, so only the schedule matters.

#
# Each ReLU is placed on the device of the Linear it feeds (more on why below), and 12 keys (minibatch
# buckets of 100 digits) go through, at most 4 in flight for (b) and (c).

# %%
digits = load_digits_dataset(batch_size=100, seed=0)
twelve_keys = Dataset("digits_12_keys", digits.train[:12], [])
graph = amp.models.mlp(input_width=64, hidden=128)
layers = ["linear1", "linear2", "linear3", "linear4"]
US = 1e-6
box = amp.NodeCost(fwd_s=1 * US, bwd_s=2 * US, update_s=0.5 * US)
figure_costs = amp.CostModel.zero(nodes=dict.fromkeys(layers, box))
relu_with_consumer = {"relu1": 1, "relu2": 2, "relu3": 3}


def simulate(mode, data, max_active_keys=4, placement=relu_with_consumer):
    return amp.train(
        graph, data, workers=4, mode=mode, max_active_keys=max_active_keys, min_update_frequency=1,
        validate=False, shuffle=False, optimizer={"name": "sgd", "lr": 0.05}, placement=placement,
        backend="simulated", costs=figure_costs,
    )


runs = {label: simulate(mode, twelve_keys) for label, mode in [("(a) sync", "sync"), ("(b) pipeline", "pipeline"),
                                                                ("(c) amp", "amp")]}
print("placement:", runs["(c) amp"].placement)

# %% [markdown]
# ## Gantt charts
#
# One row per device, one box per handled message: forward in orange, backward in blue, updates in
# yellow, each labelled with its key (instance) id. The trace is the same format the threaded backend
# writes, with virtual timestamps, so it also exports to Perfetto (`result.trace.to_chrome(path)`).

# %%
PHASE_COLOURS = {"fwd": "#f39c12", "bwd": "#2e86de", "update": "#f1c40f"}


def gantt(result, title):
    ev = result.trace.events()
    busy = ev["end"] > ev["start"]  # zero-cost light nodes leave no box
    fig = go.Figure()
    for phase_id, phase in enumerate(result.trace.phases):
        rows = busy & (ev["phase"] == phase_id)
        fig.add_trace(go.Bar(
            base=ev["start"][rows] / US, x=(ev["end"][rows] - ev["start"][rows]) / US,
            y=[f"device {w}" for w in ev["worker"][rows]], orientation="h", name=phase,
            marker={"color": PHASE_COLOURS[phase], "line": {"color": "black", "width": 1}},
            text=[str(k) if k >= 0 else "flush" for k in ev["key"][rows]], textposition="inside",
            insidetextanchor="middle",
        ))
    fig.update_layout(
        title=title, barmode="overlay", height=260, xaxis_title="virtual time (µs)", margin={"t": 40, "b": 40},
        yaxis={"categoryorder": "array", "categoryarray": [f"device {w}" for w in range(3, -1, -1)]},
    )
    return fig


for label, result in runs.items():
    rate = result.train_instances_per_s
    gantt(result, f"{label}: makespan {result.wall_s / US:.1f} µs, {rate:,.0f} instances/s").show()

# %% [markdown]
# ## Throughput, and where it comes from
#
# With S equal stages, c = f + b per key and stage, u per update, n keys and m keys per pipeline group:
#
# * sync: one key at a time, `T = n (S c + u)`;
# * pipeline: a group takes `(S - 1) f` to fill, `m c` of work on the last stage, `(S - 1) b` to drain and
#   `u` to flush: `T = (n / m) ((m + S - 1) c + u)`, a gain of `m (S c + u) / ((m + S - 1) c + u)` over
#   sync; it tends to S only as m grows, because every group pays the fill and the drain again;
# * AMP: nothing drains; once the pipe is full each device finishes a key every `c + u` (it updates after
#   every gradient here, after sending the gradient on), so with enough keys in flight
#   `T = S c + u + (n - 1)(c + u)` and the gain tends to `(S c + u) / (c + u)`, close to S (the number of
#   devices with a layer) when updates are cheap, as the run gets longer.
#
# The simulator reproduces the first two exactly (`tests/runtime/test_simulated.py` checks all three to the last
# bit):

# %%
S, f, b, u, n, m = 4, 1 * US, 2 * US, 0.5 * US, len(twelve_keys.train), 4
c = f + b
predicted = {
    "(a) sync": n * (S * c + u),
    "(b) pipeline": n / m * ((m + S - 1) * c + u),
}
sync_rate = runs["(a) sync"].train_instances_per_s
for label, result in runs.items():
    line = f"{label:13s} makespan {result.wall_s / US:5.1f} µs  {result.train_instances_per_s:12,.0f} instances/s"
    line += f"  gain over sync {result.train_instances_per_s / sync_rate:.2f}"
    if label in predicted:
        line += f"  (formula: {predicted[label] / US:.1f} µs)"
    print(line)
    if label in predicted:
        assert np.isclose(result.wall_s, predicted[label])

# %% [markdown]
# On 12 keys AMP wins by a little: with only 4 keys in flight it pays the fill once and a few bubbles
# while layers update. On longer runs the difference grows, because the pipeline pays its fill and drain
# for every group of 4 while AMP pays it once (AMP gets 8 keys in flight here, to keep every device fed):

# %%
for n_keys in (12, 48, 192):
    data = Dataset("digits_repeated", (digits.train * 16)[:n_keys], [])
    t_sync, t_pipe = simulate("sync", data).wall_s, simulate("pipeline", data).wall_s
    t_amp = simulate("amp", data, max_active_keys=8).wall_s
    amp_formula = n_keys * (S * c + u) / ((n_keys + S - 1) * (c + u))
    pipeline_formula = m * (S * c + u) / ((m + S - 1) * c + u)
    print(f"{n_keys:4d} keys: pipeline gain {t_sync / t_pipe:.2f} (formula {pipeline_formula:.2f}),"
          f" amp gain {t_sync / t_amp:.2f} (formula {amp_formula:.2f}; limit {(S * c + u) / (c + u):.2f})")
    assert np.isclose(t_sync / t_amp, amp_formula) and np.isclose(t_sync / t_pipe, pipeline_formula)

# %% [markdown]
# **Why (c) wins.** In (a) three of the four devices idle at any moment. In (b) the devices overlap
# while a group is in flight, but each flush waits for the whole group to drain: the triangles at the
# start and end of every group are idle time, paid again and again. In (c) the controller admits a new
# key as soon as one finishes and each layer updates locally, so after the first fill every device
# alternates forward and backward work without a global barrier. The price is **staleness**: a
# gradient may be computed against weights that its layer has updated since the forward pass.

# %%
for label, result in runs.items():
    st = result.staleness()
    print(f"{label:13s} staleness mean {st['mean']:.2f}, max {st['max']:.0f};  utilization",
          [f"{x:.0%}" for x in result.utilization()])

# %% [markdown]
# **Placement matters too.** By default light ops such as ReLU sit on the device of the node that feeds
# them. A worker takes its forward messages in arrival order, so the ReLU's message for key 0 waits
# behind the Linear's forward messages for keys 1-3 that were already queued, and the next device
# starts late: a bubble in every pipeline group. Putting each ReLU with the Linear it feeds removes it:

# %%
default_placement = simulate("pipeline", twelve_keys, placement={})
print("ReLU with its producer (default):", {k: default_placement.placement[k] for k in ("relu1", "relu2", "relu3")},
      f"pipeline makespan {default_placement.wall_s / US:.1f} µs")
print("ReLU with its consumer:          ", relu_with_consumer,
      f"pipeline makespan {runs['(b) pipeline'].wall_s / US:.1f} µs")

# %% [markdown]
# ## The same question with real FLOPs: `amp.whatif`
#
# Now drop the stylised boxes and let the cost model count FLOPs (appendix C: a Linear costs
# `2 k d_in d_out` forward, twice that backward, `d_in d_out` to update) for the paper's MLP with 784
# hidden units, on 4 devices of 1 TFLOPS joined by 10 Gb/s links with 1 µs latency. `whatif` trains
# the graph on the simulated hardware and reports throughput, utilization, the bandwidth the links
# carried and the staleness of the gradients.

# %%
paper_mlp = amp.models.mlp(input_width=64, hidden=784)
hardware = {"devices": 4, "flops": 1e12, "bandwidth": 10e9, "latency": 1e-6}
table = {}
for mode in ("sync", "pipeline", "amp"):
    run = amp.whatif(paper_mlp, digits, mode=mode, max_active_keys=4, optimizer={"name": "sgd", "lr": 0.05},
                     **hardware)
    table[mode] = run
    print(f"{mode:8s} {run.throughput_per_s:10,.0f} instances/s   bandwidth {run.bandwidth_bits_per_s / 1e9:5.2f} Gb/s"
          f"   utilization {[f'{x:.0%}' for x in run.utilization]}   staleness mean {run.staleness['mean']:.2f}")
print(f"amp / sync: {table['amp'].throughput_per_s / table['sync'].throughput_per_s:.2f}x")

# %% [markdown]
# The first and last layers (64 -> 784 and 784 -> 10) are small next to the two 784 x 784 layers, so
# two devices carry most of the work and the gain stays below 4: balance matters as much as asynchrony.
# Try `flops=[...]` (one figure per device), `wire_dtype="bfloat16"` (half the bytes on the links) or a
# slower link, and sweep the paper's two knobs (the paper's Fig. 5 grid; 4 epochs each, so the loss
# shows what staleness does to learning as well):

# %%
grid_runs = amp.sweep(paper_mlp, digits, max_active_keys=(1, 2, 4, 8), min_update_frequency=(1, 4), epochs=4,
                      optimizer={"name": "sgd", "lr": 0.1}, **hardware)
for r in grid_runs:
    print(f"max_active_keys {r.max_active_keys}  min_update_frequency {r.min_update_frequency}:"
          f"  {r.throughput_per_s:10,.0f} instances/s  staleness mean {r.staleness['mean']:.2f}"
          f"  train loss {r.train_loss[-1]:.3f}")
