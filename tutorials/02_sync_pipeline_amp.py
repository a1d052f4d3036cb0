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
# # 02 · Sync, pipeline, AMP: the paper's Fig. 1 on simulated hardware
#
# AMPNet is about networks of devices we do not have on a laptop. The **simulated backend** runs the
# same graph, placement, controller and worker state machines as the threaded runtime, but on a
# *virtual clock*: each message takes the time the **cost model** says it would take on the simulated
# device, and messages between devices take the link's latency plus bytes / bandwidth. The numpy math
# still runs (training is real), only time is virtual, so every schedule is exact and reproducible: a good
# place to look at *schedules*.
#
# We redo the paper's Fig. 1 for a 4-layer MLP on 4 simulated devices, one layer per device:
#
# * **(a) synchronous**: one key at a time goes forward through the 4 devices and back, then all layers
#   update together; apart from those updates, one device works at a time;
# * **(b) pipeline parallel**: up to `max_active_keys` keys enter back to back, the pipeline fills, drains,
#   and a *flush* updates all layers together before the next group;
# * **(c) asynchronous model parallel (AMP)**: keys keep entering while others are in flight, and each
#   layer updates *itself* as soon as it holds `min_update_frequency` gradients: no flush, no drain.

# %%
import os

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
# The default placement puts each Linear on its own device and each ReLU beside the Linear that feeds it.
# 12 keys (minibatch buckets of 100 digits) go through, at most 4 in flight for (b) and (c). The virtual
# clock depends only on these costs, never on the numbers the math produces, so every time below is
# exact: the notebook asserts each figure the text states.

# %%
digits = load_digits_dataset(batch_size=100, seed=0)
twelve_keys = Dataset("digits_12_keys", digits.train[:12], [])
graph = amp.models.mlp(input_width=64, hidden=128)
layers = ["linear1", "linear2", "linear3", "linear4"]
US = 1e-6
box = amp.NodeCost(fwd_s=1 * US, bwd_s=2 * US, update_s=0.5 * US)
figure_costs = amp.CostModel.zero(nodes=dict.fromkeys(layers, box))


def simulate(mode, data, max_active_keys=4, placement=None):
    return amp.train(
        graph, data, workers=4, mode=mode, max_active_keys=max_active_keys, min_update_frequency=1,
        validate=False, shuffle=False, optimizer={"name": "sgd", "lr": 0.05}, placement=placement or {},
        backend="simulated", costs=figure_costs,
    )


runs = {label: simulate(mode, twelve_keys) for label, mode in [("(a) sync", "sync"), ("(b) pipeline", "pipeline"),
                                                                ("(c) amp", "amp")]}
print("placement:", runs["(c) amp"].placement)
assert runs["(c) amp"].placement == {"x": 0, "linear1": 0, "relu1": 0, "linear2": 1, "relu2": 1, "linear3": 2,
                                     "relu3": 2, "linear4": 3, "target": 3, "loss": 3}  # fmt: skip

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
# The simulator reproduces the first two exactly here (`tests/runtime/test_simulated.py` checks all three
# to the last bit); the third needs enough keys in flight, below:

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
assert np.isclose(runs["(c) amp"].wall_s, 62 * US)  # below the pipeline's 64.5 µs

# %% [markdown]
# On 12 keys AMP wins by a little (62.0 µs against 64.5): with only 4 keys in flight a device sometimes
# waits for the next key. With 8 in flight every device stays fed and AMP's makespan is the formula's
# `S c + u + (n - 1)(c + u)` exactly; the longer the run, the more the pipeline loses, because it pays
# its fill and drain for every group of 4 while AMP pays them once:

# %%
for n_keys in (12, 48, 192):
    data = Dataset("digits_repeated", (digits.train * 16)[:n_keys], [])
    t_sync, t_pipe = simulate("sync", data).wall_s, simulate("pipeline", data).wall_s
    t_amp = simulate("amp", data, max_active_keys=8).wall_s
    assert np.isclose(t_amp, S * c + u + (n_keys - 1) * (c + u))
    amp_formula = n_keys * (S * c + u) / (S * c + u + (n_keys - 1) * (c + u))
    pipeline_formula = m * (S * c + u) / ((m + S - 1) * c + u)
    print(f"{n_keys:4d} keys: pipeline gain {t_sync / t_pipe:.2f} (formula {pipeline_formula:.2f}),"
          f" amp gain {t_sync / t_amp:.2f} (formula {amp_formula:.2f}; limit {(S * c + u) / (c + u):.2f})")
    assert np.isclose(t_sync / t_amp, amp_formula) and np.isclose(t_sync / t_pipe, pipeline_formula)

# %% [markdown]
# **Why (c) wins.** In (a) one device works at a time, except for the flush after each key, where all four
# update at once: the forward and backward work of the four devices adds up to no more than the makespan
# (asserted below). In (b) the devices overlap
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
ev = runs["(a) sync"].trace.events()
work = ev["phase"] < 2  # forward and backward rows; phase 2 is the update
assert np.sum(ev["end"][work] - ev["start"][work]) <= runs["(a) sync"].wall_s * (1 + 1e-9)
assert runs["(a) sync"].staleness()["max"] == runs["(b) pipeline"].staleness()["max"] == 0
assert runs["(c) amp"].staleness()["max"] > 0

# %% [markdown]
# **Placement matters too, even of an op that costs nothing.** Move each ReLU to the device of the Linear it
# feeds (`relu1` to device 1, and so on) and AMP's makespan grows from 51.0 µs to 52.5 µs on these 12 keys
# with 8 in flight, while the pipeline's stays 64.5 µs. The reason is the update. A device sends a
# gradient on *before* its own update, but a ReLU beside the Linear whose gradient it passes back waits in
# that device's queue behind the update. So the first key's gradient waits `u` = 0.5 µs at each of the 3
# device boundaries on its way back: 1.5 µs more. After that every device still finishes a key every
# `c + u`, so the difference stays 1.5 µs however long the run (48 keys below). The pipeline updates only
# at its flushes, after the backward pass has drained, so nothing waits there:

# %%
relu_with_consumer = {"relu1": 1, "relu2": 2, "relu3": 3}
makespans = {}
forty_eight = Dataset("digits_48_keys", (digits.train * 4)[:48], [])
for name, where in (("ReLU beside its input (default)", None), ("ReLU beside its consumer", relu_with_consumer)):
    makespans[name] = [
        simulate("amp", twelve_keys, 8, where).wall_s,
        simulate("pipeline", twelve_keys, 4, where).wall_s,
        simulate("amp", forty_eight, 8, where).wall_s,
    ]
    print(f"{name:32s} 12 keys: amp (8 in flight) {makespans[name][0] / US:.1f} µs, pipeline "
          f"{makespans[name][1] / US:.1f} µs;  48 keys: amp {makespans[name][2] / US:.1f} µs")
assert np.allclose(makespans["ReLU beside its input (default)"][:2], (51.0 * US, 64.5 * US))
assert np.allclose(makespans["ReLU beside its consumer"][:2], (52.5 * US, 64.5 * US))
assert np.isclose(makespans["ReLU beside its consumer"][2] - makespans["ReLU beside its input (default)"][2], 1.5 * US)

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
    run = amp.whatif(paper_mlp, digits, mode=mode, max_active_keys=4, **hardware)
    table[mode] = run
    print(f"{mode:8s} {run.throughput_per_s:10,.0f} instances/s   bandwidth {run.bandwidth_bits_per_s / 1e9:5.2f} Gb/s"
          f"   utilization {[f'{x:.0%}' for x in run.utilization]}   staleness mean {run.staleness['mean']:.2f}")
amp_gain = table["amp"].throughput_per_s / table["sync"].throughput_per_s
print(f"amp / sync: {amp_gain:.2f}x")
busy = table["amp"].utilization
assert 1 < amp_gain < 4 and min(busy[1], busy[2]) > max(busy[0], busy[3])

# %% [markdown]
# The first and last layers (64 -> 784 and 784 -> 10) are small next to the two 784 x 784 layers, so
# the two middle devices are the busiest and the gain stays below 4 (both asserted): balance matters as
# much as asynchrony. Try `flops=[...]` (one figure per device), `wire_dtype="bfloat16"` (half the bytes
# on the links) or a slower link.
#
# Finally the paper's two knobs (its Fig. 5 grid): `max_active_keys` against `min_update_frequency`, every
# point from the same initial weights, 4 epochs each with the default optimizer (Adam, learning rate
# 1e-3), so the loss shows what staleness does to learning as well as the clock shows what it buys:

# %%
grid_runs = amp.sweep(paper_mlp, digits, max_active_keys=(1, 2, 4, 8), min_update_frequency=(1, 4), epochs=4,
                      **hardware)  # fmt: skip
point = {(r.max_active_keys, r.min_update_frequency): r for r in grid_runs}
for r in grid_runs:
    print(f"max_active_keys {r.max_active_keys}  min_update_frequency {r.min_update_frequency}:"
          f"  {r.throughput_per_s:10,.0f} instances/s  staleness mean {r.staleness['mean']:.2f}"
          f"  train loss by epoch {[round(x, 3) for x in r.train_loss]}")

# %% [markdown]
# Reading the grid (each statement is asserted below; chance is a loss of ln 10 = 2.30):
#
# * every run learns: its last epoch's training loss is below 1.5;
# * throughput rises with the keys in flight, and so does staleness;
# * updating after 4 gradients instead of 1 cuts the staleness at every `max_active_keys` above 1;
# * with one key in flight an update per gradient learns faster (four times the updates from the same
#   gradients), while at 8 keys in flight updating after every gradient learns slowest of the grid and
#   updating after 4 does better: the paper's "neither too large nor too small". Tutorial 06 sweeps this
#   properly, to a target accuracy.

# %%
for m in (1, 4):
    rates = [point[(k, m)].throughput_per_s for k in (1, 2, 4, 8)]
    staleness = [point[(k, m)].staleness["mean"] for k in (1, 2, 4, 8)]
    assert rates == sorted(rates) and rates[0] < rates[-1] and staleness == sorted(staleness)
for k in (2, 4, 8):
    assert point[(k, 4)].staleness["mean"] < point[(k, 1)].staleness["mean"]
final = {key: r.train_loss[-1] for key, r in point.items()}
assert max(final.values()) < 1.5 and max(final, key=final.get) == (8, 1)
assert final[(1, 1)] < final[(1, 4)] and final[(8, 4)] < final[(8, 1)]

# %% [markdown]
# ## Fig. 1 on this machine's threads
#
# The simulator shows schedules; the threaded runtime runs them on real cores. The same three modes for the
# paper's MLP (784 hidden units, keys of 100 digits), now on worker threads of this machine, run by the
# native engine when it is built (the default): 2 workers, each holding two adjacent layers
# (`placement="balanced"`; round robin would give each worker a first and a third layer, and the workers
# would take turns) and serving messages in arrival order (`priority="fifo"`), 4 keys in flight for
# `pipeline` and `amp`; and `amp` on a single worker, where only the number of workers differs. Three
# interleaved rounds of one epoch each (the order flips every round); the comparisons below are computed
# from the medians.

# %%
threaded = {
    "sync, 2 workers": {"mode": "sync", "workers": 2},
    "pipeline, 2 workers": {"mode": "pipeline", "workers": 2, "max_active_keys": 4},
    "amp, 2 workers": {"mode": "amp", "workers": 2, "max_active_keys": 4},
    "amp, 1 worker": {"mode": "amp", "workers": 1, "max_active_keys": 4},
}
measured = {name: [] for name in threaded}
for r in range(3):
    for name in threaded if r % 2 == 0 else list(threaded)[::-1]:
        run = amp.train(paper_mlp, digits, placement="balanced", priority="fifo", validate=False, epochs=1,
                        optimizer={"name": "sgd", "lr": 0.05}, seed=0, **threaded[name])  # fmt: skip
        measured[name].append(run.train_instances_per_s)
rate = {name: float(np.median(v)) for name, v in measured.items()}
print(f"engine: {run.engine}; {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.1f}")
for name, values in measured.items():
    print(f"{name:20s} rounds {', '.join(f'{x:>6,.0f}' for x in values)} instances/s; median {rate[name]:>6,.0f}")
for a, b in (("amp, 2 workers", "sync, 2 workers"), ("amp, 2 workers", "pipeline, 2 workers"),
             ("amp, 2 workers", "amp, 1 worker")):  # fmt: skip
    ratio = rate[a] / rate[b]
    verdict = "faster" if ratio > 1.1 else "slower" if ratio < 1 / 1.1 else "about the same (within 10%)"
    print(f"{a} against {b}: {ratio:.2f}x, {verdict}")

# %% [markdown]
# Two workers can at best double the throughput of one here: the machine has two cores, and two layers of
# the four on each worker make a stage of about half the work. The simulator's gains over sync assumed a
# device per layer, free of anything else; on threads a message that crosses to the other worker also
# costs a hand-off, and the cores are shared with every other program on the machine: the load average
# printed above counts the threads that wanted a core during the last minute. Above about 2 on this
# 2-core machine, the two workers do not get two cores to themselves and the comparisons shrink, or turn
# around; run the cell again on an idle machine to see the difference. The paper's 16-core runtime
# measured 3.0x the throughput at 4 keys in flight against 1 on this MLP (its Table 2).
