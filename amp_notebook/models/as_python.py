"""The model zoo written as plain Python functions, for ``amp.compile``.

Each function is the same model as its hand-built namesake in this package (same node names for every
weight, so parameters move between the two; ``tests/compiler`` checks that losses and gradients agree to
float64 precision), written the way one would write it in a define-by-run framework::

    import amp_notebook as amp
    from amp_notebook.models import as_python

    graph = amp.compile(as_python.rnn, hidden=64)      # the constants are the functions' defaults
    graph = amp.compile(as_python.tree_lstm, vocab_size=len(vocab))

What the hand-built versions spell out (Ungroup, Isu, Phi, Cond, Collect, the loop counter ``t``, the tree
position ``pos``) the compiler deduces from the ``for`` loop and the recursion.
"""

from __future__ import annotations

from amp_notebook.compiler import nn


def mlp(x: nn.Floats(), target: nn.Ints(), input_width=64, hidden=784, classes=10, layers=4):
    """The paper's MLP: ``layers - 1`` hidden Linear + ReLU layers and a Linear output (cf. ``models.mlp``)."""
    width = input_width
    for i in nn.unroll(layers - 1):
        x = nn.relu(nn.linear(x, hidden, in_features=width, name=f"linear{i + 1}"), name=f"relu{i + 1}")
        width = hidden
    return nn.softmax_cross_entropy(nn.linear(x, classes, in_features=width, name=f"linear{layers}"), target)


def rnn(tokens: nn.Sequence(int), target: nn.Ints(), vocab_size=14, hidden=128, embedding_dim=64, classes=10):
    """The variable-length RNN of the paper's Fig. 2 on list reduction (cf. ``models.rnn``)."""
    h = nn.zeros(hidden)
    for token in tokens:
        x = nn.concat(nn.embedding(token, vocab_size, embedding_dim, name="embed"), h)
        h = nn.relu(nn.linear(x, hidden, name="step"))
    return nn.softmax_cross_entropy(nn.linear(h, classes, name="out"), target)


def tree_lstm(
    tree: nn.Tree(),
    vocab_size=100,
    embedding_dim=64,
    hidden=64,
    classes=5,
    embed_update_frequency=1000,
    update_frequency=50,
):
    """The binary Tree-LSTM, one tree per key, a loss at every node (cf. ``models.tree_lstm``)."""

    def node(t):
        if t.is_leaf:
            word = nn.embedding(
                t.word, vocab_size, embedding_dim, name="embed", min_update_frequency=embed_update_frequency
            )
            state = nn.tree_lstm_leaf(word, hidden, name="leaf", min_update_frequency=update_frequency)
        else:
            state = nn.tree_lstm_branch(
                node(t.left), node(t.right), hidden, name="branch", min_update_frequency=update_frequency
            )
        h, _c = nn.split(state, [hidden, hidden])
        logits = nn.linear(h, classes, name="classify", min_update_frequency=update_frequency)
        nn.softmax_cross_entropy(logits, t.label)
        return state

    node(tree)


def ggsnn(
    node_features: nn.Floats(),
    typed_edges: nn.Ints(),
    node_graph: nn.Ints(),
    target: nn.Ints(),
    feature_width=23,
    edge_types=4,
    hidden=32,
    steps=4,
    classes=4,
):
    """A gated graph network over ``steps`` propagation steps, classifying each graph (cf. ``models.ggsnn``)."""
    h = nn.linear(node_features, hidden, in_features=feature_width, name="init")
    for step in range(steps):
        messages = nn.linear(h, edge_types * hidden, name="edges")
        incoming = nn.typed_edge_sum(messages, typed_edges[step], edge_types, name="propagate")
        h = nn.gru_cell(incoming, h, hidden, name="gru")
    gated = nn.sigmoid(nn.linear(h, hidden, name="gate")) * nn.tanh(nn.linear(h, hidden, name="value"))
    per_graph = nn.scatter_sum(gated, node_graph, nn.zeros(1, name="graphs"), name="sum_nodes")
    return nn.softmax_cross_entropy(nn.linear(per_graph, classes, name="readout"), target)
