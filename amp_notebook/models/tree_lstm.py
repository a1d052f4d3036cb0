"""The binary Tree-LSTM of the paper's sentiment experiment (Tai et al. 2015), one tree per key.

How one static graph walks every tree
-------------------------------------
A key is one tree (no batching, as in the paper). Its nodes are numbered by heap position: the root is
``pos = 1`` and the children of ``p`` are ``2p`` (left) and ``2p + 1`` (right), so the tree's shape lives
entirely in the state field ``pos`` and no node of the graph knows it in advance::

    leaf_table (n_leaves, 2) = [pos, word id]
      -> Flatmap 'leaf_rows'        one message per leaf, state (key, ..., pos)
      -> Embedding 'embed'          (1,) word id -> (1, embedding_dim)
      -> tree_lstm_leaf 'leaf'      -> [h; c] (1, 2 hidden)
      -> Phi 'nodes'  <------------------------------------------------+
      -> Cond 'is_root' on ``pos == 1``                                 |
           false (an inner node) -> Bcast 'fanout'                      |
                 -> Collect 'children' (key ``pos // 2``, slot ``pos % 2``, 2 members, sets ``pos``)
                 -> tree_lstm_branch 'branch' -> back to Phi 'nodes' ---+
                 -> (second copy) Phi 'heads'
           true (the root)        -> Phi 'heads'
      Phi 'heads' -> Split 'h_c' -> h -> Linear 'classify' -> SoftmaxCrossEntropy 'loss'
                                 -> c -> Discard 'drop_c'
    label_table (n_nodes, 2) = [pos, label] -> Flatmap 'label_rows' -> the loss's target (joined on state)

The Collect waits until both children of ``pos // 2`` have arrived, concatenates them left to right (slot
``pos % 2``) and emits the parent with ``pos`` replaced by ``pos // 2``; the Collect also closes the loop
(the validator accepts it in place of an Isu because it changes ``pos``). Every node, leaves and root
included, gets its own classifier and loss, so a key reports ``n_nodes`` losses and the runtime's
accuracy is node-level accuracy. :func:`predict_nodes` recomputes the predictions with numpy to read
off root-level accuracy.

Node names and weight layout (for copying weights to and from PyTorch)
---------------------------------------------------------------------
Every Linear holds ``W`` (in, out), the transpose of torch's ``weight``, and ``b`` (out,).

* ``embed``: ``E`` (vocab_size, embedding_dim).
* ``leaf_gates``: ``W`` (embedding_dim, 3 hidden), gates side by side in the order (i, o, u):
  ``c = sigmoid(i) * tanh(u)``, ``h = sigmoid(o) * tanh(c)``.
* ``branch_gates``: ``W`` (2 hidden, 5 hidden) reading ``[h_left; h_right]``, gates (i, f_left, f_right, o, u):
  ``c = sigmoid(i) * tanh(u) + sigmoid(f_left) * c_left + sigmoid(f_right) * c_right``, ``h = sigmoid(o) * tanh(c)``.
* ``classify``: ``W`` (hidden, classes) on ``h``.

Update frequencies
------------------
As in the paper, the embedding updates after ``embed_update_frequency`` (1000) gradients and every other
parameterized node after ``update_frequency`` (50); both are set as the nodes' ``min_update_frequency``
attribute, which overrides the run's default in ``amp`` mode. Pass ``None`` to use the run's value instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_notebook.data.batch import Batch
from amp_notebook.ir.cells import tree_lstm_branch, tree_lstm_leaf
from amp_notebook.ir.graph import Graph

PAPER_EMBED_UPDATE_FREQUENCY = 1000
PAPER_UPDATE_FREQUENCY = 50


def tree_lstm(
    vocab_size: int,
    embedding_dim: int = 64,
    hidden: int = 64,
    classes: int = 5,
    *,
    embed_update_frequency: int | None = PAPER_EMBED_UPDATE_FREQUENCY,
    update_frequency: int | None = PAPER_UPDATE_FREQUENCY,
) -> Graph:
    """The binary Tree-LSTM sentiment classifier; inputs ``leaf_table`` and ``label_table`` (see module doc)."""
    g = Graph("tree_lstm")
    words = g.flatmap(g.input("leaf_table", dtype="int"), "pos", keep_2d=False, name="leaf_rows")
    embedded = g.embedding(words, vocab_size, embedding_dim, name="embed")
    leaf = tree_lstm_leaf(g, embedded, hidden, name="leaf")
    nodes = g.phi(leaf, None, name="nodes")
    root, inner = g.cond(nodes, "pos == 1", name="is_root")
    up, to_head = g.bcast(inner, 2, name="fanout")
    children = g.collect(up, key="pos // 2", index="pos % 2", count=2, field="pos", name="children")
    g.connect(tree_lstm_branch(g, children, hidden, name="branch"), "nodes", "in1")
    h, c = g.split(g.phi(root, to_head, name="heads"), [hidden, hidden], name="h_c")
    g.discard(c, name="drop_c")
    logits = g.linear(h, classes, name="classify")
    targets = g.flatmap(g.input("label_table", dtype="int"), "pos", keep_2d=False, name="label_rows")
    g.softmax_cross_entropy(logits, targets, name="loss")
    for name in g.parameterized():
        g.nodes[name].min_update_frequency = embed_update_frequency if name == "embed" else update_frequency
    return g


def tree_lstm_forest(
    vocab_size: int, embedding_dim: int = 64, hidden: int = 64, classes: int = 5, *, fused: bool = True
) -> Graph:
    """The same Tree-LSTM (same cells, same weights and node names for them) over *forest* keys: a bucket of
    trees per key (``data.forest.forest_batch``), run level by level instead of node by node.

    One message holds the states [h; c] of every node of the bucket, a table (R, 2 hidden), and goes round
    a loop once per level; level t's branches read their children's rows with two Gathers, run one
    batched branch cell and add their own rows in with a ScatterSum (each row is written once, into
    zeros, so adding is placing)::

        leaf_words (L,) -> Embedding 'embed' -> tree_lstm_leaf 'leaf' -> ScatterSum 'leaf_table'
            (into R rows at leaf_rows; R from labels) -> Isu 'start' (t = 0) -> Phi 'levels' <----------+
        -> Cond 'more' on ``t < levels``                                                               |
             true -> Bcast 'table_fanout' -> Gather 'left_children' / 'right_children' (index: the     |
                     Partition of table 'left' / 'right' by level, joined on the state's t)          |
                  -> Concat 'children' -> tree_lstm_branch 'branch' -> ScatterSum 'place' (at the    |
                     Partition of 'rows') -> Add 'table' (old table + new rows) -> Isu 'tick' (t + 1) -+
             false -> Split 'h_c' -> h -> Linear 'classify' -> SoftmaxCrossEntropy 'loss' (labels (R,));
                                     c -> Discard 'drop_c'

    A key's loss is the mean over all nodes of its trees. Messages per key grow with the number of levels
    (the tallest tree), not with the number of trees or nodes: the paper's "keys are buckets of instances"
    applied to trees of different shapes. Every parameterized node updates after ``min_update_frequency``
    gradients of the run (the branch cell's Linear gets one per level).
    """
    g = Graph("tree_lstm_forest")
    embedded = g.embedding(g.input("leaf_words", dtype="int"), vocab_size, embedding_dim, name="embed")
    leaves = tree_lstm_leaf(g, embedded, hidden, name="leaf", fused=fused)
    labels_for_loss, labels_for_rows = g.bcast(g.input("labels", dtype="int"), 2, name="labels_fanout")
    table = g.scatter_sum(leaves, g.input("leaf_rows", dtype="int"), labels_for_rows, name="leaf_table")
    table = g.isu(table, forward={"t": "0"}, backward={"t": None}, name="start")
    more, done = g.cond(g.phi(table, None, name="levels"), "t < levels", name="more")
    to_left, to_right, like, old = g.bcast(more, 4, name="table_fanout")
    left = g.gather(to_left, g.partition(g.input("left", dtype="int"), "t", False, "left_levels"), name="left_children")
    right = g.gather(
        to_right, g.partition(g.input("right", dtype="int"), "t", False, "right_levels"), name="right_children"
    )
    branches = tree_lstm_branch(g, g.concat(left, right, name="children"), hidden, name="branch", fused=fused)
    rows = g.partition(g.input("rows", dtype="int"), "t", keep_2d=False, name="level_rows")
    new = g.add(old, g.scatter_sum(branches, rows, like, name="place"), name="table")
    g.connect(g.isu(new, forward={"t": "t + 1"}, backward={"t": "t - 1"}, name="tick"), "levels", "in1")
    h, c = g.split(done, [hidden, hidden], name="h_c")
    g.discard(c, name="drop_c")
    g.softmax_cross_entropy(g.linear(h, classes, name="classify"), labels_for_loss, name="loss", match_on=("key",))
    return g


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def predict_nodes(params: dict[str, dict[str, Any]], batch: Batch) -> dict[int, int]:
    """The predicted class of every node of one tree key, by heap position, from parameters in the layout
    above (what ``TrainResult.params`` holds): a numpy re-statement of the graph's forward pass."""
    E = np.asarray(params["embed"]["E"], dtype=np.float64)
    Wl, bl = params["leaf_gates"]["W"], params["leaf_gates"]["b"]
    Wb, bb = params["branch_gates"]["W"], params["branch_gates"]["b"]
    Wc, bc = params["classify"]["W"], params["classify"]["b"]
    hidden = Wl.shape[1] // 3
    states: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for pos, word in batch.inputs["leaf_table"].tolist():
        i, o, u = np.split(E[word] @ Wl + bl, 3)
        c = _sigmoid(i) * np.tanh(u)
        states[pos] = (_sigmoid(o) * np.tanh(c), c)
    for pos in sorted(batch.inputs["label_table"][:, 0].tolist(), reverse=True):  # children before parents
        if pos in states:
            continue
        (h_l, c_l), (h_r, c_r) = states[2 * pos], states[2 * pos + 1]
        i, f_l, f_r, o, u = np.split(np.concatenate([h_l, h_r]) @ Wb + bb, 5)
        c = _sigmoid(i) * np.tanh(u) + _sigmoid(f_l) * c_l + _sigmoid(f_r) * c_r
        states[pos] = (_sigmoid(o) * np.tanh(c), c)
    assert all(len(s[0]) == hidden for s in states.values())
    return {pos: int(np.argmax(h @ Wc + bc)) for pos, (h, _) in states.items()}


def root_accuracy(params: dict[str, dict[str, Any]], batches: list[Batch]) -> float | None:
    """The fraction of trees whose root (``pos == 1``) is classified correctly; None without trees."""
    if not batches:
        return None
    correct = 0
    for batch in batches:
        labels = dict(batch.inputs["label_table"].tolist())
        correct += predict_nodes(params, batch)[1] == labels[1]
    return correct / len(batches)
