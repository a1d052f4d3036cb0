# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Trees and graphs: per-instance structure in one static graph
#
# The RNN of tutorial 01 varied only in length. A Tree-LSTM's structure differs per sentence and a graph
# network's per molecule or story; AMPNet still builds **one** static graph and lets the *state* of each
# message carry the structure. Two models from the zoo show the two ways to do it:
#
# * `tree_lstm`: every tree node is its own message, addressed by its heap position `pos` (root 1,
#   children `2p` and `2p+1`). A **Flatmap** turns the leaf table into one message per leaf; a **Collect**
#   on `pos // 2` waits for both children and emits their parent; a **Cond** on `pos == 1` lets the root out.
# * `ggsnn`: a whole graph's node states (N, H) are one message; the edges travel as integer index
#   payloads, one per propagation step, joined to the node states by the loop counter `t`.

# %%
import os

import amp_notebook as amp
from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, babi15_graphs, ggsnn_dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset, synthetic_sentiment_trees
from amp_notebook.data.trees import tree_to_ptb
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import ggsnn, tree_lstm
from amp_notebook.models.tree_lstm import root_accuracy

# %% [markdown]
# ## A Tree-LSTM, one tree per key
#
# Synthetic sentiment trees with compositional labels (negation flips, intensifiers scale, "but"
# overrides). A key holds two tables: `leaf_table` = [pos, word id] and `label_table` = [pos, label].

# %%
data = sentiment_tree_dataset(n_train=300, n_val=100, seed=0)
print(tree_to_ptb(synthetic_sentiment_trees(1, seed=3, min_leaves=4, max_leaves=4)[0]))
key = data.train[0]
print("leaf_table (pos, word):", key.inputs["leaf_table"].tolist())
print("label_table (pos, label):", key.inputs["label_table"].tolist())

# %%
tree_graph = tree_lstm(
    int(data.meta["vocab_size"]), embedding_dim=16, hidden=16, embed_update_frequency=None, update_frequency=None
)
for name in ("leaf_rows", "nodes", "is_root", "children", "classify", "loss"):
    print(f"{name:10s}", tree_graph.nodes[name].op)

# %% [markdown]
# Follow the states through the reference interpreter: the Collect hands the branch cell one message per
# parent, with `pos` replaced by `pos // 2`, until the root (`pos == 1`) leaves through the Cond.

# %%
interp = Interpreter(tree_graph, seed=0)
seen: list[int] = []
original = interp.ops["children"].forward


def spy(ctx, port, x, state):
    out = original(ctx, port, x, state)
    seen.extend(s["pos"] for _, _, s in out)
    return out


collect_op = interp.ops["children"]
collect_op.forward = spy  # watch the Collect for one key, then put it back
reports = interp.run_key(key, key=0)
del collect_op.forward
print("parents emitted by the Collect, in order:", seen)
print("one loss per node:", len(reports), "==", key.fields["n_nodes"])

# %% [markdown]
# Train asynchronously: 2 workers, 4 trees in flight. `val_accuracy` counts every tree node; the root's
# accuracy comes from `root_accuracy` (a numpy re-statement of the forward pass). In the paper the
# embedding updates every 1000 gradients and the other nodes every 50 (the zoo model's default, which
# `amp-notebook train --model tree-lstm` uses); the graph above was built with
# `embed_update_frequency=None, update_frequency=None`, so here every node updates after each gradient
# (the run's `min_update_frequency`, 1).

# %%
tree_result = amp.train(
    tree_graph, data, workers=2, mode="amp", max_active_keys=4, optimizer={"name": "adam", "lr": 0.02}, epochs=1
)
stale = tree_result.staleness()
root = root_accuracy(tree_result.params, data.val)
print(f"node accuracy {tree_result.val_accuracy[-1]:.3f}, root accuracy {root:.3f}")
print(f"{tree_result.train_instances_per_s:.0f} trees/s, staleness mean {stale['mean']:.2f} max {stale['max']:.0f}")
print("engine:", tree_result.engine, "| nodes run through Python:", list(tree_result.python_nodes) or "none")

# %% [markdown]
# ## Bundling: many trees' messages in one call
#
# With one tree per key every message carries one tree node's row (16 numbers here), so the cost of
# handling a message, not arithmetic, sets the pace. But with several trees in flight, messages of
# *different* keys queue up at the same node: the embedding, the gate Linears, the cells, the loss. With
# `max_bundle` a node takes up to that many of the messages waiting for it (same port, same direction) and
# runs them as one call: one matrix product over their stacked rows, split back so every message keeps its
# own state, cache entry, staleness record and credit. The numbers are those of the messages one by one
# (to the rounding of a larger matrix product). `amp` runs bundle up to 16 messages by default;
# `max_bundle=1` turns bundling off.
# `order="largest_bundle"` lets each worker serve the node with the most messages waiting, so bundles grow.
#
# Below, the same trees with bundling off and with bundles of up to 32, everything else equal: three
# rounds each, interleaved, because thread timings on a shared machine drift (every round is printed),
# then the last round's pair side by side in the dashboard: a bundle is one box, and hovering over it lists
# its keys.

# %%
import numpy as np

from amp_notebook.ui import Dashboard

per_tree = {"workers": 2, "mode": "amp", "max_active_keys": 16, "optimizer": {"name": "adam", "lr": 0.02}, "epochs": 1,
            "order": "largest_bundle"}  # fmt: skip
settings = {"max_bundle 1 ": 1, "max_bundle 32": 32}
runs = {label: [] for label in settings}
for r in range(3):
    for label in list(settings) if r % 2 == 0 else list(settings)[::-1]:
        runs[label].append(amp.train(tree_graph, data, max_bundle=settings[label], **per_tree))
for label, results in runs.items():
    messages = results[-1].trace.events()["messages"]
    rates = [x.train_instances_per_s for x in results]
    print(f"{label}: rounds {', '.join(f'{x:.0f}' for x in rates)} trees/s (median {np.median(rates):.0f}); "
          f"{messages.sum()} messages in {len(messages)} calls ({messages.mean():.1f} per call); node accuracy "
          f"{', '.join(f'{x.val_accuracy[-1]:.3f}' for x in results)}")
unbundled, bundled = runs["max_bundle 1 "][-1], runs["max_bundle 32"][-1]
Dashboard.compare(unbundled, bundled, labels=("max_bundle 1", "max_bundle 32"))

# %% [markdown]
# ## Buckets of trees: a forest per key
#
# One tree per key makes every tree node a chain of small messages. Another answer is that a key is a
# *bucket* of instances, as the paper's RNN and MLP keys are. Trees of
# different shapes still share a bucket if it runs level by level: `forest_dataset` numbers every node of
# 25 trees as a row of one state table (leaves first, then branches by height), and `tree_lstm_forest`
# (same cells, same weights) sends that whole table round a loop once per level. A **Partition** turns each
# `[level, row]` index table into one index message per level, joined to the table by the loop counter `t`,
# just as the GG-NN below joins its edges.

# %%
from amp_notebook.data.forest import forest_dataset
from amp_notebook.models import tree_lstm_forest

forests = forest_dataset(data, trees_per_key=25)
print(
    "keys:",
    len(forests.train),
    "| levels of the first forest:",
    forests.train[0].fields["levels"],
    "| rows:",
    forests.train[0].fields["n_nodes"],
)
forest_result = amp.train(
    tree_lstm_forest(int(data.meta["vocab_size"]), embedding_dim=16, hidden=16),
    forests,
    workers=2,
    mode="amp",
    max_active_keys=3,
    optimizer={"name": "adam", "lr": 0.01},
    epochs=3,
)
root = root_accuracy(forest_result.params, data.val)  # the same weights layout: the per-tree check applies
print(
    f"node accuracy {forest_result.val_accuracy[-1]:.3f}, root accuracy {root:.3f}, "
    f"{forest_result.train_instances_per_s:.0f} trees/s"
)

# %% [markdown]
# ## The paper's layout next to PyTorch
#
# Is one tree per key, walked node by node, fast enough to use? The benchmark `amp-notebook bench
# tree-vs-torch` answers at full size; below, its own code (`amp_notebook.bench.tree_vs_torch`) at a small
# size: 150 trees, 2 epochs. Every side starts from the same weights (embedding 64, hidden 64) and trains
# with Adam at the same learning rate:
#
# * **ours, one tree per key**: the zoo's `tree_lstm` with the paper's update frequencies (the embedding
#   every 1000 gradients, the other nodes every 50), 32 trees in flight, bundles of up to 128 messages;
#   1 worker, and the same on 2 workers;
# * **PyTorch eager**: one tree at a time, a Python loop over its nodes, as a define-by-run framework runs a
#   dynamic model without help; 25 trees' gradients per Adam step;
# * **PyTorch level-batched**: 25 trees at a time, one cell call per tree level across them: the hand
#   batching that one tree per key spares you.
#
# The figure is training trees per second (the median over epochs; evaluation counts, as in ours), three
# rounds, the sides interleaved; the table shows every round. PyTorch runs on one thread here, as our one
# worker does; other programs on the machine slow every side, so the load average is printed too.
# PyTorch is an optional dependency: without it, the cell says so and skips the comparison.

# %%
from amp_notebook.bench import tree_vs_torch
from amp_notebook.bench.common import interleaved_runs, median_run

try:
    import torch
except ImportError:
    torch = None
if torch is None:
    print("PyTorch is not installed, and this comparison needs it: pip install torch")
else:
    # One PyTorch thread, against our one worker: two threads of PyTorch wait for each other at every small
    # operation, and on a busy machine each wait can last a whole time slice of the scheduler.
    tree_vs_torch.TORCH_THREADS = 1
    trees = sentiment_tree_dataset(n_train=150, n_val=50, seed=0)
    sides = {
        "ours, one tree per key, 1 worker": lambda: tree_vs_torch.ours(trees, 2, 0, "ours_per_tree"),
        "ours, one tree per key, 2 workers": lambda: tree_vs_torch.ours(trees, 2, 0, "ours_per_tree_2_workers"),
        "PyTorch eager": lambda: tree_vs_torch.torch_side(trees, 2, 0, batched=False),
        "PyTorch level-batched": lambda: tree_vs_torch.torch_side(trees, 2, 0, batched=True),
    }
    side_runs = interleaved_runs(3, sides)
    best = {name: median_run(rs) for name, rs in side_runs.items()}
    for name, side in best.items():
        rates = ", ".join(f"{x:,.0f}" for x in side["runs_instances_per_s"])
        print(f"{name:34s} rounds {rates} trees/s (median {side['instances_per_s']:,.0f}); "
              f"node accuracy {side['final_metric']:.3f}, root {side['root_accuracy']:.3f}")
    rate = {name: side["instances_per_s"] for name, side in best.items()}
    for peer in ("PyTorch eager", "PyTorch level-batched"):
        print(f"ours on 1 worker against {peer} on {torch.get_num_threads()} thread: "
              f"{rate['ours, one tree per key, 1 worker'] / rate[peer]:.2f}x the trees per second")
    print(f"ours on 2 workers against 1: "
          f"{rate['ours, one tree per key, 2 workers'] / rate['ours, one tree per key, 1 worker']:.2f}x; "
          f"load average {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} cores")

# %% [markdown]
# What separates the sides: the eager loop pays Python's and PyTorch's dispatch for every tree node, one
# tree at a time, while our workers handle each message in native code and run the messages of many trees
# that wait at one node as one call. Level-batched PyTorch is the fair opponent: it batches the same way by
# hand, in 25-tree minibatches planned before training. Accuracy is not the point at this size (the
# PyTorch sides take a dozen Adam steps); `amp-notebook bench tree-vs-torch` trains 2,000 trees for 4 epochs and prints
# the accuracies beside the speeds. With 1 worker against 2, the same questions as in tutorial 01 apply: a
# second worker needs a free core (other programs on this machine compete for it) and pays a hand-off for
# every message that crosses.

# %% [markdown]
# ## A gated graph network, one graph per key
#
# bAbI task 15 ("What is Gertrude afraid of?") as a graph: people and animal types are nodes, facts are
# typed edges, and the network answers by node selection: a softmax over the graph's nodes. One Linear
# computes every node's message under every edge type, and a TypedEdgeSum adds each edge's message (its
# type's block of its source's row) into its destination. The edges arrive as a (steps, 2, E) array; an
# Ungroup with counter `t` turns it into one index message per step, so the step-t TypedEdgeSum joins the
# node states of the same `t`, just as the RNN joins its step-t token.

# %%
steps = 3
graphs = babi15_graphs(300, seed=0, inflate_to=8)
graph_data = ggsnn_dataset(graphs, 4, "node_selection", steps, val_instances=babi15_graphs(100, seed=1, inflate_to=8))
print(graphs[0].meta["question_text"], "->", graphs[0].meta["answer"])
first = graph_data.train[0].inputs
print("typed_edges (steps, 2, edges):", first["typed_edges"].shape, " node_features:", first["node_features"].shape)
graph_graph = ggsnn(4, BABI15_FEATURE_WIDTH, hidden=16, steps=steps, task="node_selection")
print(graph_graph.nodes["more"].op, "|", graph_graph.nodes["tick"].op, "|", graph_graph.nodes["propagate"].op)

# %%
graph_result = amp.train(
    graph_graph, graph_data, workers=2, mode="amp", max_active_keys=4, optimizer={"name": "adam", "lr": 0.003}, epochs=2
)
stale = graph_result.staleness()
print("val accuracy per epoch:", [round(a, 3) for a in graph_result.val_accuracy])
print(f"{graph_result.train_instances_per_s:.0f} graphs/s, staleness mean {stale['mean']:.2f} max {stale['max']:.0f}")

# %% [markdown]
# ## Who worked when
#
# The Gantt chart of the worker threads (forward, backward, update slices) of the GG-NN run, and how busy
# each worker was: with several keys in flight, a worker can take another graph's message while one
# graph's next step waits on the other worker.

# %%
from amp_notebook.ui.report import gantt_figure

gantt_figure(graph_result.trace).show()
print("utilization per worker:", [f"{u:.0%}" for u in graph_result.utilization()])
