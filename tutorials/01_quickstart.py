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
# # 01 · Quickstart: a variable-length RNN trained asynchronously
#
# AMPNet (Gaunt et al., 2017) trains *dynamic* networks with a *static* graph. Instead of padding
# sequences to one length or re-tracing a graph per instance, the graph routes **messages**: a payload
# (a tensor) plus a small **state** record (the key id, a loop counter `t`, ...). Control-flow nodes
# read the state:
#
# * **Cond** sends a message down one branch by a predicate on its state (`t < length`),
# * **Phi** merges branches and loop back-edges,
# * **Isu** (invertible state update) advances the loop counter, and undoes it on the way back.
#
# Every node runs on some worker; each parameterized node updates itself once it holds
# `min_update_frequency` gradients, while the controller keeps up to `max_active_keys` keys in flight.
# That is asynchronous model parallelism. In this notebook we build the paper's Fig. 2 RNN by hand,
# train it on the list-reduction task and look at throughput, accuracy and gradient staleness.

# %%
import os

import numpy as np

import amp_notebook as amp
from amp_notebook import engine

# %% [markdown]
# ## The data: list reduction
#
# Each sequence is an operation token followed by up to 9 digits; the target is the result mod 10 of
# `mean`, `mean(even positions) - mean(odd positions)`, `max - min` or `len`. Instances are bucketed
# into keys of (up to) 100 sequences of equal length, as in the paper: a key's `tokens` payload has
# shape (length, bucket) and its state carries `length`.

# %%
data = amp.data.list_reduction_dataset(n_train=10_000, n_val=1_000, seed=0)
key = data.train[0]
print(len(data.train), "training keys;", "first key:", key.size, "sequences of length", key.fields["length"])
print("tokens", key.inputs["tokens"].shape, "targets", key.inputs["target"][:10])

# %% [markdown]
# ## Build the graph
#
# The builder reads like the model. `ungroup` turns the token matrix into one message per time step
# (state gains `t`); the initial hidden state enters with `t = 0` through an Isu; the Phi's second input
# is the loop back-edge, connected once the Cond exists.

# %%
H, E = 64, 32
g = amp.Graph("my_rnn")
tokens = g.input("tokens", dtype="int")
embedded = g.embedding(g.ungroup(tokens, counter="t"), 14, E, name="embed")
h0 = g.isu(g.zeros("h0", H), forward={"t": "0"}, backward={"t": None}, name="start")
h_in = g.phi(h0, None, name="loop")
h = g.relu(g.linear(g.concat(embedded, h_in, name="cat"), H, name="step"))
h = g.isu(h, forward={"t": "t + 1"}, backward={"t": "t - 1"}, name="tick")
again, finished = g.cond(h, "t < length", name="more")
g.connect(again, "loop", "in1")
logits = g.linear(finished, 10, name="out")
g.softmax_cross_entropy(logits, g.input("target", dtype="int"), name="loss", match_on=["key"])
g.validate(require_loss=True)
print(g, "heavy nodes:", g.parameterized())

# %% [markdown]
# Validation catches structural mistakes with messages that name the node and port. For instance a
# Cond whose `false` branch goes nowhere:

# %%
broken = amp.Graph("broken")
x = broken.input("x", width=4)
yes, no = broken.cond(x, "key % 2 == 0", name="route")
broken.mse(yes, broken.input("target", width=4))
try:
    broken.validate()
except amp.ValidationError as err:
    print(err)

# %% [markdown]
# ## Train asynchronously
#
# Two worker threads, four keys in flight, each heavy node updating after 10 gradients. In `amp` mode a
# node also runs up to 16 messages that wait for it as one call by default (*bundling*, tutorial 04); the
# numbers are those of the messages one by one, to the rounding of a larger matrix product.
#
# The workers run on the **native engine** when it is built (the default, `engine="auto"`): each worker is
# a C++ thread that moves messages, runs the ops and updates its nodes without holding Python's global
# interpreter lock (GIL), so two workers can compute at the same time, as the paper's C++ runtime did. An
# op without a native kernel (your own op, say) still runs, through Python. `engine="python"` runs every
# op in Python, where the workers take turns on one core. The summary says which engine ran and which
# nodes went through Python.

# %%
result = amp.train(
    g, data, workers=2, mode="amp", max_active_keys=4, min_update_frequency=10,
    optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0}, epochs=3, seed=0,
)
summary = result.summary()
print(f"{summary['train_instances_per_s']:.0f} training instances/s")
print("validation accuracy per epoch:", [round(a, 3) for a in summary["val_accuracy"]])
print("worker utilization:", [round(u, 2) for u in summary["utilization"]])
print("engine:", summary["engine_used"], "| nodes run through Python:", summary["python_nodes"] or "none")
if engine.available():  # the default picks the native engine when it is built
    assert summary["engine_used"] == "native"

# %% [markdown]
# ## Staleness
#
# A gradient's staleness is how many updates its node made between the forward pass that produced the
# activation and the backward pass that brought the gradient. In `sync` mode it is always 0; with
# several keys in flight, some gradients are computed against older weights.

# %%
print("staleness:", summary["staleness"])
hist = amp.trace.staleness_histogram(result.trace)
for node, counts in hist.items():
    print(f"{node:6s}", dict(list(counts.items())[:8]))

# %% [markdown]
# In `sync` mode one key is in flight at a time and every node updates after each key, so every gradient
# was computed with the weights its node still holds: staleness 0, always.

# %%
sync = amp.train(g, data, workers=2, mode="sync", optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0},
                 epochs=1, seed=0)  # fmt: skip
print("sync staleness:", sync.summary()["staleness"])
assert sync.staleness()["max"] == 0

# %% [markdown]
# ## What asynchrony buys on this machine
#
# A fair comparison changes one thing at a time. Below, the same graph, optimizer, update frequency and one
# epoch of 20,000 training lists (no validation), in five settings:
#
# * `sync`: one key at a time, every node updates after it (the paper's Fig. 1a), on 2 workers;
# * `amp` with 1, 4 and 8 keys in flight, on 2 workers: only `max_active_keys` changes;
# * `amp` with 4 keys in flight on 1 worker: only the number of workers changes.
#
# Each setting runs three times, the settings interleaved (the order flips every round) because the load of
# a shared machine drifts; the table shows every round and the median, and the sentences after it are
# computed from the medians. The paper measured 1.23x for this RNN at 4 keys over 1 (its Table 2), on 16
# cores.

# %%

SETTINGS = {
    "sync, 2 workers": {"mode": "sync", "workers": 2},
    "amp, 1 key, 2 workers": {"mode": "amp", "max_active_keys": 1, "workers": 2},
    "amp, 4 keys, 2 workers": {"mode": "amp", "max_active_keys": 4, "workers": 2},
    "amp, 8 keys, 2 workers": {"mode": "amp", "max_active_keys": 8, "workers": 2},
    "amp, 4 keys, 1 worker": {"mode": "amp", "max_active_keys": 4, "workers": 1},
}
lists = amp.data.list_reduction_dataset(n_train=20_000, n_val=100, seed=1)
rounds = {name: [] for name in SETTINGS}
stale, busy, engines = {name: [] for name in SETTINGS}, {name: [] for name in SETTINGS}, set()
for r in range(3):
    for name in SETTINGS if r % 2 == 0 else list(SETTINGS)[::-1]:
        run_k = amp.train(
            g, lists, min_update_frequency=10, validate=False, optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0},
            epochs=1, seed=0, **SETTINGS[name],
        )  # fmt: skip
        rounds[name].append(run_k.train_instances_per_s)
        stale[name].append(run_k.staleness()["mean"])
        busy[name].append(sum(run_k.utilization()))
        engines.add(run_k.engine)
median = {name: float(np.median(v)) for name, v in rounds.items()}
load, cores = os.getloadavg()[0], len(os.sched_getaffinity(0))
print(f"engine: {', '.join(sorted(engines))}; {cores} cores, load average {load:.1f} (runnable threads, all users)")
for name in SETTINGS:
    print(f"{name:23s} rounds {', '.join(f'{x:>7,.0f}' for x in rounds[name])} instances/s; median "
          f"{median[name]:>7,.0f} ({median[name] / median['sync, 2 workers']:.2f}x sync); "
          f"staleness {np.median(stale[name]):.2f}; workers busy {np.median(busy[name]):.2f}")
med_stale = {name: float(np.median(v)) for name, v in stale.items()}
assert med_stale["sync, 2 workers"] == 0 < med_stale["amp, 1 key, 2 workers"] < med_stale["amp, 8 keys, 2 workers"]


# %%
def compare(a: str, b: str) -> str:
    """``a``'s median throughput against ``b``'s, with a 10% band for "about the same" (the rounds scatter)."""
    ratio = median[a] / median[b]
    verdict = "faster" if ratio > 1.1 else "slower" if ratio < 1 / 1.1 else "about the same"
    return f"{a}: {ratio:.2f}x the throughput of {b} ({verdict})"


best = max(("amp, 1 key, 2 workers", "amp, 4 keys, 2 workers", "amp, 8 keys, 2 workers"), key=median.get)
print("amp against sync:    ", compare(best, "sync, 2 workers"))
print("keys in flight:      ", compare("amp, 4 keys, 2 workers", "amp, 1 key, 2 workers"))
print("2 workers against 1: ", compare("amp, 4 keys, 2 workers", "amp, 4 keys, 1 worker"))
ev = result.trace.events()
at_step = ev["node"] == result.trace.node_names.index("step")
step_messages = ev["messages"][at_step & (ev["phase"] < 2)].sum() / ev["messages"][ev["phase"] < 2].sum()
step_time = np.sum((ev["end"] - ev["start"])[at_step]) / np.sum(ev["end"] - ev["start"])
print(f"In the first run, the node `step` handled {step_messages:.0%} of the forward and backward messages "
      f"and took {step_time:.0%} of the workers' busy time; heavy nodes on workers "
      f"{ {n: result.placement[n] for n in g.parameterized()} }; the median call took "
      f"{np.median(ev['end'] - ev['start']) * 1e6:.1f} µs")

# %% [markdown]
# **Why keys in flight pay.** With one key in flight a worker waits whenever the key's next message is on
# the other worker, and between keys both wait for the controller (in Python) to hear that the key finished
# and to admit the next one. With several keys in flight a worker usually has another key's message to
# run, and the messages of different keys that wait for the same node run as one call (bundling), so the
# cost per message shrinks as well. The price is staleness, which grows with the keys in flight (asserted
# above).
#
# **Why a second worker helps this RNN little, or not at all.** A sequence's steps run one after another (step `t + 1`
# needs the hidden state of step `t`), so only different keys can keep both workers busy, and every node runs on one
# worker: `step`, whose share of the work is printed above, can never be split. Each time step's messages also cross
# between the workers (the embedding and `step` sit on different ones, printed above), and every crossing is a
# hand-off that wakes the other worker, while the work of a call is small (the median call's time is printed above).
# The paper's answer to a busy node is to replicate it (tutorial 07). A second worker also needs a free core: the load
# average printed above counts the threads that wanted a core during the last minute, other users' included; above
# about 2 on a 2-core machine, the two workers do not get two cores to themselves.

# %% [markdown]
# ## The trace
#
# Every handled message is a row: worker, node, phase (forward, backward, update), key, start, end, and
# `messages`, more than 1 for a bundle of messages run as one call (its row carries its first key;
# `trace.bundle_keys()` lists them all). It exports to the Chrome trace format that
# [Perfetto](https://ui.perfetto.dev) opens.

# %%
ev = result.trace.events()
print({name: col[:5] for name, col in ev.items()})
doc = result.trace.to_chrome(window=(0.0, 0.2))
print(len(doc["traceEvents"]), "trace events in the first 0.2 s")
assert np.all(ev["end"] >= ev["start"])
