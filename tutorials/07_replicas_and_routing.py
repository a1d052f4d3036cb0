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
# # 07 · Replicas and routing: data parallelism inside model parallelism, and Distribute/Collect
#
# AMPNet places each heavy node on a device and streams keys through them: *model* parallelism. Two
# things route messages beyond that:
#
# 1. **Replicas.** A node that is the bottleneck can be copied R times behind a `Cond` on `key % R` and a
#    `Phi`: key k runs through copy k mod R, so R copies work on different keys at once (*data*
#    parallelism, inside the model-parallel graph). Each copy updates its own parameters from its own
#    keys' gradients; before each epoch's validation keys the runtime sets all copies to their average,
#    so validation measures the one model the epoch hands over.
# 2. **Distribute and Collect.** A `Distribute` sends each message down one of several branches by a
#    value of its state (an edge type, a word's frequency); a `Collect` waits for every message of a
#    group and puts them back together. The paper's BiLSTM tagger routes each word of a sentence by its
#    frequency this way and collects the sentence afterwards.
#
# We look at both in the graph builder and in the live dashboard. (Run in JupyterLab to see the widgets;
# the code runs without them.)

# %%
import warnings

import numpy as np
from IPython.display import display

import amp_notebook as amp
from amp_notebook.data import list_reduction_dataset
from amp_notebook.ui import Dashboard, GraphBuilder

warnings.simplefilter("ignore", UserWarning)

# %% [markdown]
# ## Replicas on the list-reduction RNN
#
# The RNN of the paper's Fig. 2 spends most of its time in its `step` Linear, which runs once per element
# of every list. `rnn(replicas=4)` copies it (and its ReLU) four times: the builder shows the `Cond`
# `replica_route` on `key % 4`, the four copies `step0`..`step3`, and the `Phi` `replica_merge` that joins
# them before the loop goes on. `graph.replica_groups` lists the nodes whose parameters are kept as one.

# %%
graph = amp.models.rnn(replicas=4)
print("replica groups:", graph.replica_groups)
print("route:", graph.nodes["replica_route"].op.config())
builder = GraphBuilder(graph)
builder.workers = 2
placement = builder.auto_place("balanced")  # contiguous stages; the replicas land on both workers
print({n: placement[n] for n in ("embed", "step0", "step1", "step2", "step3", "out")})
assert [placement[f"step{i}"] for i in range(4)] == [0, 0, 1, 1]
builder

# %% [markdown]
# ## Train it and watch the copies share the work
#
# In the dashboard's Gantt chart the `step` boxes of different keys run on both workers: with the
# placement printed (and asserted) above, keys that are 0 or 1 mod 4 take their steps on worker 0, 2 or 3
# on worker 1. The dashboard stays open once the run is over, with the whole run in it.

# %%
data = list_reduction_dataset(n_train=3_000, n_val=300, seed=0)
run = amp.train(graph, data, workers=2, placement="balanced", mode="amp", max_active_keys=8, epochs=3,
                optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0}, background=True)
dash = Dashboard(run)
dash

# %%
result = run.wait(timeout=300)
dash.wait_feed(timeout=10)  # the dashboard above has drawn the whole run and stays open
print(f"{result.train_instances} lists in {result.wall_s:.1f} s, validation accuracy per epoch "
      f"{[round(a, 3) for a in result.val_accuracy]}")

# %% [markdown]
# Which keys did each copy see? The trace has one row per message handled, or per *bundle* of messages
# a node ran as one call (amp runs bundle by default; `trace.bundle_keys()` lists a bundle's keys). The
# forward messages of `step{i}` carry only keys with `key % 4 == i` (asserted).

# %%
events, bundles = result.trace.events(), result.trace.bundle_keys()
names = result.trace.node_names


def forward_keys(trace_events, node: str) -> list[int]:
    """The key of every forward message ``node`` handled, a bundle's row counting once per message."""
    ev = trace_events
    rows = np.flatnonzero((ev["node"] == names.index(node)) & (ev["phase"] == 0))
    return [key for i in rows for key in (bundles[(int(ev["worker"][i]), int(ev["row"][i]))]
                                         if ev["messages"][i] > 1 else [int(ev["key"][i])])]  # fmt: skip


for i in range(4):
    keys = np.unique(forward_keys(events, f"step{i}"))
    print(f"step{i}: {len(keys)} keys, key % 4 = {sorted(set((keys % 4).tolist()))}, "
          f"on worker {result.placement[f'step{i}']}")
    assert set((keys % 4).tolist()) == {i}

# %% [markdown]
# Within an epoch the copies drift apart: each follows its own keys' gradients. Once the epoch's training
# keys are done the runtime averages them (before validating), so after training they hold the same
# weights, exactly:

# %%
W = [result.params[f"step{i}"]["W"] for i in range(4)]
print("copies equal after the last epoch:", all(np.array_equal(W[0], w) for w in W[1:]))
assert all(np.array_equal(W[0], w) for w in W[1:])

# %% [markdown]
# What the copies buy is throughput where the `step` node is the bottleneck. On simulated hardware (one
# device per heavy node, each a core of this project's machine, see tutorial 06) the same RNN with 1 and
# with 4 copies of `step`. With one copy, the device of `step` is busy all the time and the others mostly
# wait; four copies share that work and the simulated throughput more than doubles (both asserted; the
# simulator's clock is exact):

# %%
from amp_notebook.reproduce.fig5 import COSTS

small = list_reduction_dataset(n_train=2_000, n_val=100, seed=0)
simulated = {}
for r in (1, 4):
    g = amp.models.rnn(replicas=r)
    devices = 2 + r  # embedding, the copies of step, output layer
    w = amp.whatif(g, small, devices=devices, costs=COSTS, max_active_keys=16, min_update_frequency=10,
                   optimizer={"name": "adam", "lr": 3e-3})
    simulated[r] = w
    print(f"replicas {r} on {devices} devices: {w.throughput_per_s:,.0f} lists per simulated second, "
          f"utilization {[round(u, 2) for u in w.utilization]}")
one = simulated[1]
assert one.utilization[one.result.placement["step"]] == max(one.utilization) > 0.95
assert simulated[4].throughput_per_s > 2 * one.throughput_per_s

# %% [markdown]
# The price is in learning per epoch: each copy makes only a quarter of the updates between two
# averages. The paper's Table 1 shows what that cost on list reduction: 10.5 epochs to 97% with one copy
# and 4 keys in flight, 12 with 2 copies (4 keys), 13 with 4 copies (8 keys); in time the copies still
# won (66 s, 38 s and 21 s). Replicas pay when the gained throughput outruns the extra epochs.
#
# ## Distribute and Collect on the BiLSTM tagger
#
# The paper's tagger reads each word of a sentence in one of two ways: a frequent word is looked up in a
# word embedding, a rare word is spelled out by a character-level bidirectional LSTM. In the graph a
# `Partition` turns the sentence into one message per word, a `Distribute` (`by_frequency`) sends each
# word down the embedding branch (b0) or the character branch (b1) by a value of its state, and a
# `Collect` (`sentence`) waits until every word of the sentence is back and stacks them in order for the
# word-level LSTMs. In the dashboard the character branch's boxes appear only for sentences with rare
# words, and a sentence's word-level work starts only once its slowest word is done.

# %%
from amp_notebook.data.ner import synthetic_ner_dataset

ner = synthetic_ner_dataset(n_train=120, n_val=30, seed=0)
tagger = amp.models.bilstm_tagger(ner.meta["vocab_size"], ner.meta["char_vocab_size"], ner.meta["num_tags"])
print("Distribute:", tagger.nodes["by_frequency"].op.config())
print("Collect:", tagger.nodes["sentence"].op.config())
tagger_builder = GraphBuilder(tagger)
tagger_builder

# %%
tagger_run = amp.train(tagger, ner, workers=2, placement="balanced", mode="amp", max_active_keys=16,
                       epochs=1, optimizer={"name": "adam", "lr": 3e-3}, background=True)
tagger_dash = Dashboard(tagger_run)
display(tagger_dash)
tagged = tagger_run.wait(timeout=300)
tagger_dash.wait_feed(timeout=10)  # the whole run stays in the dashboard above
ev, names = tagged.trace.events(), tagged.trace.node_names
fwd = ev["phase"] == 0
for branch, node in (("b0, word embedding", "word_embed"), ("b1, characters", "char_embed")):
    words = int(np.sum(ev["messages"][fwd & (ev["node"] == names.index(node))]))  # a bundle's row: several words
    print(f"{branch}: {words} words")
print(f"token accuracy after one epoch {tagged.val_accuracy[-1]:.3f}")
