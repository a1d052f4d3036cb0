"""The variable-length vanilla RNN of the paper's Fig. 2, for the list-reduction task.

One static graph runs every sequence length with explicit control flow: the token matrix of a bucket
(time-major, shape (length, bucket)) is ungrouped into one message per step with state ``t``; the
initial hidden state enters with ``t = 0`` through an Isu; a Phi merges it with the loop back-edge;
Concat joins the step's embedding with the hidden state of the same ``t``; Linear + ReLU computes the
next hidden state; an Isu advances ``t``; a Cond on ``t < length`` either loops back to the Phi or
leaves for the output Linear and the loss. With ``replicas > 1`` the step Linear+ReLU is copied behind
a Cond on ``key % replicas`` and a Phi, and the copies average their parameters at each epoch's end.
"""

from __future__ import annotations

from amp_notebook.ir.graph import Graph, Ref


def rnn(
    vocab_size: int = 14,
    hidden: int = 128,
    embedding_dim: int = 64,
    classes: int = 10,
    replicas: int = 1,
) -> Graph:
    g = Graph("rnn" if replicas == 1 else f"rnn_x{replicas}")
    tokens = g.input("tokens", dtype="int")
    step_tokens = g.ungroup(tokens, counter="t", name="steps")
    embedded = g.embedding(step_tokens, vocab_size, embedding_dim, name="embed")
    h0 = g.isu(g.zeros("h0", hidden), forward={"t": "0"}, backward={"t": None}, name="start")
    hidden_in = g.phi(h0, None, name="loop")
    joined = g.concat(embedded, hidden_in, name="cat")

    def step(graph: Graph, x: Ref, i: int) -> Ref:
        suffix = "" if replicas == 1 else str(i)
        z = graph.linear(x, hidden, in_features=embedding_dim + hidden, name=f"step{suffix}")
        return graph.relu(z, name=f"relu{suffix}")

    h = g.replicate(joined, replicas, step, name="replica")
    h = g.isu(h, forward={"t": "t + 1"}, backward={"t": "t - 1"}, name="tick")
    again, finished = g.cond(h, "t < length", name="more")
    g.connect(again, "loop", "in1")
    logits = g.linear(finished, classes, name="out")
    g.softmax_cross_entropy(logits, g.input("target", dtype="int"), name="loss", match_on=("key",))
    return g
