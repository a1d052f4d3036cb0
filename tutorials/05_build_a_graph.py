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
# # 05 · Build a graph on the canvas: the RNN of the paper's Fig. 2, piece by piece
#
# `GraphBuilder` is a canvas for IR graphs. Drag ops from the palette, connect ports, type properties in
# the inspector, press **auto-place** to colour nodes by worker and **Train** to start a run with the live
# dashboard beside the canvas. Python owns the graph: every gesture is an *intent* ("add node", "connect",
# "set property", ...) that Python applies to the IR `Graph`, validates, and draws back, with undo and
# redo kept in Python.
#
# The same intents are Python methods, so this notebook builds the variable-length RNN of the paper's
# Fig. 2 step by step with them, and the canvas shows each step as it happens. (Run the notebook in
# JupyterLab to see the canvas; the code works without it.)

# %%
import amp_notebook as amp
from amp_notebook.ir.graph import Graph
from amp_notebook.ui import GraphBuilder
from amp_notebook.ui.builder_model import BuilderError

H, E, VOCAB, CLASSES = 32, 16, 14, 10
builder = GraphBuilder(Graph("fig2_rnn"))
builder

# %% [markdown]
# ## 1. The tokens, one message per step
#
# A key is a bucket of sequences of equal length: its `tokens` payload has shape (length, bucket).
# **Ungroup** turns it into one message per time step and adds the loop counter `t` to each state.
# Every op comes with default properties; `config` overrides them.

# %%
builder.add_node("input", name="tokens", config={"dtype": "int"})
builder.add_node("ungroup", name="steps", config={"counter": "t"})
builder.connect("tokens", "out", "steps", "in")
builder.add_node("embedding", name="embed", config={"num_embeddings": VOCAB, "embedding_dim": E})
builder.connect("steps", "out", "embed", "in")

# %% [markdown]
# The graph is incomplete, and the validator says exactly what is missing: each message names the node
# and port, and how to fix it. On the canvas the same messages are red badges on the nodes and ports.

# %%
for message in builder.problems():
    print("-", message)

# %% [markdown]
# ## 2. The loop: Isu, Phi, Concat, Linear, ReLU, Isu, Cond
#
# The initial hidden state enters as zeros with `t = 0` (an **Isu**, invertible state update, whose
# backward deletes `t` again); a **Phi** merges it with the loop's back-edge; **Concat** joins the step's
# embedding with the hidden state of the same `t`; **Linear** + **ReLU** compute the next hidden state; an
# Isu advances `t`; a **Cond** on `t < length` loops back or leaves.

# %%
builder.add_node("input", name="h0", config={"width": H, "fill": "zeros"})
builder.add_node("isu", name="start", config={"forward": "t = 0", "backward": "t = None"})
builder.add_node("phi", name="loop")
builder.add_node("concat", name="cat")
builder.add_node("linear", name="step", config={"in_features": E + H, "out_features": H})
builder.add_node("relu", name="relu")
builder.add_node("isu", name="tick", config={"forward": "t = t + 1", "backward": "t = t - 1"})
builder.add_node("cond", name="more", config={"predicate": "t < length"})
for src, dst, port in [
    ("h0", "start", "in"), ("start", "loop", "in0"), ("embed", "cat", "in0"), ("loop", "cat", "in1"),
    ("cat", "step", "in"), ("step", "relu", "in"), ("relu", "tick", "in"),
]:  # fmt: skip
    builder.connect(src, "out", dst, port)
builder.connect("tick", "out", "more", "in")
builder.connect("more", "true", "loop", "in1")  # the back-edge
builder.problems()

# %% [markdown]
# ## 3. What the builder refuses
#
# Wrong connections, wrong property types and unsafe expressions are refused with a message, and the
# graph stays as it was. Expressions (Cond predicates, Isu updates) are parsed by a small safe language:
# state fields, numbers, arithmetic, comparisons and `min`/`max`/`abs`; no other calls, no attributes, no
# names starting with `_`. Nothing typed into the builder is ever run as Python.

# %%
attempts = [
    lambda: builder.connect("embed", "out", "step", "in"),  # step's input is already fed by cat
    lambda: builder.set_property("step", "out_features", "many"),
    lambda: builder.set_property("more", "predicate", "__import__('os').system('ls')"),
    lambda: builder.set_property("more", "predicate", "t.__class__"),
]
for attempt in attempts:
    try:
        attempt()
    except BuilderError as exc:
        print("refused:", exc)

# %% [markdown]
# ## 4. The output and the loss, and an inferred width that does not fit
#
# The output Linear reads the final hidden state. Give it the wrong `in_features` and the validator
# reports the mismatch with the width it inferred along the edge; set the property and it is gone.
# Undo and redo work on every step.

# %%
builder.add_node("linear", name="out", config={"in_features": 64, "out_features": CLASSES})
builder.connect("more", "false", "out", "in")
builder.add_node("input", name="target", config={"dtype": "int"})
builder.add_node("softmax_cross_entropy", name="loss", config={"match_on": "key"})
builder.connect("out", "out", "loss", "logits")
builder.connect("target", "out", "loss", "target")
[m for m in builder.problems() if "width" in m]

# %%
builder.set_property("out", "in_features", H)
builder.undo()
print("after undo:", len(builder.problems()), "problem(s)")
builder.redo()
print("after redo:", builder.problems())

# %% [markdown]
# ## 5. The same graph as the model zoo's, as JSON and as Python
#
# `builder.graph` is the IR `Graph`. It equals `amp.models.rnn` with the same sizes (up to the order of its
# edge list). The builder exports JSON (the versioned schema of `amp_notebook.ir.serialize`) and Python
# builder code generated from the graph's data; both rebuild the same graph.

# %%
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict


def canonical(graph):
    data = graph_to_dict(graph)
    data["edges"] = sorted(data["edges"])
    return data


reference = amp.models.rnn(vocab_size=VOCAB, hidden=H, embedding_dim=E, classes=CLASSES)
reference.name = "fig2_rnn"
print("same as amp.models.rnn:", canonical(builder.graph) == canonical(reference))
print("JSON round trip:", canonical(graph_from_dict(graph_to_dict(builder.graph))) == canonical(builder.graph))
assert canonical(builder.graph) == canonical(reference)
assert canonical(graph_from_dict(graph_to_dict(builder.graph))) == canonical(builder.graph)
print(builder.to_python())

# %% [markdown]
# ## 6. Place and train
#
# `auto_place` runs the placement heuristic (heavy ops round-robin over workers, light ops follow their
# producer) and pins each node to its worker. On the canvas, "colour by worker" shows the placement view:
# one lane per worker beside the canvas, with its nodes and its cost (multiply-adds per row of its Linear
# and Embedding nodes). Drag a node from the canvas onto a lane to pin it to that worker, or a lane's chip
# onto "heuristic" to unpin it; in Python the same intent is `pin`. The lanes are in the view Python sends:

# %%
builder.workers = 2
placement = builder.auto_place()
print({name: placement[name] for name in ("embed", "step", "out")})
builder.pin("out", 0)  # what dropping `out` on worker 0's lane sends
for lane in builder.view["lanes"]:
    print(f"worker {lane['worker']}: {lane['nodes']} nodes, heavy {lane['heavy_nodes']}, {lane['cost']} MAC/row")

# %% [markdown]
# `train` starts a background run on a copy of the graph and opens the live dashboard beside the canvas
# (the **Train** button does the same with `builder.train_data`). Here we wait for one short epoch on 2,000
# lists: enough to see the graph train, far too little to learn the task (the accuracy printed stays well
# below one half; always giving the most frequent answer scores about 12%). List reduction needs many more
# lists: `amp-notebook demo` trains the same Fig. 2 RNN, wider and with a copy of its step on each worker,
# on 100,000 lists for up to 20 epochs, stopping once its validation accuracy reaches 97%.

# %%

data = amp.data.list_reduction_dataset(n_train=2_000, n_val=300, seed=0)
run = builder.train(data, epochs=1, max_active_keys=4, optimizer={"name": "adam", "lr": 3e-3})
result = run.wait(timeout=120)
print(f"trained {result.train_instances} sequences in {result.wall_s:.1f} s")
print(f"validation accuracy {result.val_accuracy[-1]:.2f}")
assert result.val_accuracy[-1] < 0.5
