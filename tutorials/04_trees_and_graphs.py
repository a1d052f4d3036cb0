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

# %% [markdown]
# ## Bundling: many trees' messages in one call
#
# With one tree per key every message carries one tree node's row, and Python glue per message, not
# arithmetic, sets the pace. But with several trees in flight, messages of *different* keys queue up at the
# same node: the embedding, the gate Linears, the cells, the loss. With `max_bundle` a node takes up to that
# many of the messages waiting for it (same port, same direction) and runs them as one call: one matrix
# product over their stacked rows, split back so every message keeps its own state, cache entry, staleness
# record and credit. The numbers are those of the messages one by one (to the rounding of a larger matrix
# product). `amp` runs bundle up to 16 messages by default; `max_bundle=1` turns bundling off.
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
# One tree per key makes every tree node a chain of small messages, and Python glue per message, not
# arithmetic, sets the pace. The paper's answer is that a key is a *bucket* of instances. Trees of
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
