"""PyTorch peers of our dynamic models, for the benchmarks (torch is a dev dependency: import this lazily).

Tree-LSTM (binary, Tai et al. 2015, the math of ``ir.cells.tree_lstm_leaf`` / ``tree_lstm_branch``)
---------------------------------------------------------------------------------------------------
Weights use our layout, ``W`` of shape (in, out), so a graph's parameters load without transposes::

    leaf:    [i, o, u] = E[word] @ W_leaf + b_leaf;           c = s(i) * tanh(u);   h = s(o) * tanh(c)
    branch:  [i, f_l, f_r, o, u] = [h_l; h_r] @ W_br + b_br;  c = s(i) * tanh(u) + s(f_l) c_l + s(f_r) c_r
    every node: logits = h @ W_cls + b_cls, cross-entropy against the node's label

A tree is one key of ``data.sentiment.sentiment_tree_dataset``: a ``Batch`` with ``positions`` (heap positions:
root 1, children 2p and 2p + 1) in post-order, ``labels``, ``is_leaf`` and ``leaf_words``. Two ways to run it:

- ``eager_tree_losses``: one tree at a time, a Python loop over its nodes in post-order, what a user writes
  first in PyTorch (the classifier runs once per tree over the stacked ``h``).
- ``batched_tree_losses``: a minibatch of trees at once. All leaves go through the leaf cell together, then
  the branches level by level, deepest first (the depth of position p is ``floor(log2 p)``, as in
  ``tree_arrays``' ``positions_by_level``), each level one batched branch cell across all trees; the
  classifier runs once over every node of the minibatch.

Both return per-node losses; ``minibatch_loss`` averages them per tree and then over trees, which is how
our runtime weighs a key (a key's gradient is that of its mean loss; an update averages keys).

GGNN (gated graph neural network, Li et al. 2016; the math of ``models.ggsnn``'s classification/regression)
--------------------------------------------------------------------------------------------------------
``TorchGGNN`` holds the weights; ``dense_forward`` and ``scatter_forward`` compute the same graph outputs::

    h0 = x @ W_init + b_init                                      node annotations -> hidden
    step: a_v = sum over edges (u -> v) of type e of (h_u @ W_e + b_e);   h = GRUCell(a, h)
    readout: r = sum over nodes of sigmoid(h @ W_gate + b_gate) * tanh(h @ W_value + b_value)
             output = r @ W_readout + b_readout                    (class logits, or one regression value)

Graphs are ``data.graphs.GraphInstance``s (edges (E, 2) as (source, destination), edge types (E,)).

- dense: the graphs of a minibatch are padded to the largest N and each edge type's adjacency is a dense
  (B, N, N) count matrix (the paper's TensorFlow baseline); padded nodes are masked out of the readout.
- scatter: the graphs are concatenated; each node's message under every edge type comes from one einsum,
  each edge gathers its (source, type) row, ``index_add_`` sums messages into the targets, and the readout
  is a segment sum over each graph's nodes.

Node selection (``TorchGGNN(node_selection=True)``, Li et al.'s bAbI answer): the readout is one score per
node, ``h @ W_score + b_score``; dense gives logits (B, N) with padding at -inf, scatter the scores of the
concatenated nodes, for ``segment_cross_entropy`` (a softmax over each graph's own nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from amp_notebook.data.batch import Batch
from amp_notebook.data.graphs import GraphInstance

Params = Mapping[str, Mapping[str, np.ndarray]]


def _param(shape: tuple[int, ...], scale: float, generator: torch.Generator, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype) * scale)


def _glorot(fan_in: int, fan_out: int, generator: torch.Generator, dtype: torch.dtype) -> nn.Parameter:
    bound = float(np.sqrt(6.0 / (fan_in + fan_out)))
    return nn.Parameter((torch.rand((fan_in, fan_out), generator=generator, dtype=dtype) * 2 - 1) * bound)


# ---------------------------------------------------------------------------------------------------------
# Tree-LSTM

TREE_LSTM_NAMES: dict[str, str] = {"embed": "embed", "leaf": "leaf_gates", "branch": "branch_gates",
                                   "classify": "classify"}  # fmt: skip


class TorchTreeLSTM(nn.Module):
    """Embedding, binary Tree-LSTM leaf and branch cells, a classifier at every node (weights in our layout)."""

    def __init__(
        self, vocab_size: int, embedding_dim: int = 64, hidden: int = 64, classes: int = 5, seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:  # fmt: skip
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.hidden = hidden
        self.embed = _param((vocab_size, embedding_dim), 0.1, gen, dtype)
        self.leaf_W = _glorot(embedding_dim, 3 * hidden, gen, dtype)
        self.leaf_b = nn.Parameter(torch.zeros(3 * hidden, dtype=dtype))
        self.branch_W = _glorot(2 * hidden, 5 * hidden, gen, dtype)
        self.branch_b = nn.Parameter(torch.zeros(5 * hidden, dtype=dtype))
        self.classify_W = _glorot(hidden, classes, gen, dtype)
        self.classify_b = nn.Parameter(torch.zeros(classes, dtype=dtype))

    def load(self, params: Params, names: Mapping[str, str] = TREE_LSTM_NAMES) -> None:
        """Copy a graph's parameters (node -> {"E"} or {"W", "b"}); ``names`` maps our roles to node names."""
        with torch.no_grad():
            self.embed.copy_(torch.as_tensor(params[names["embed"]]["E"]))
            for role in ("leaf", "branch", "classify"):
                getattr(self, f"{role}_W").copy_(torch.as_tensor(params[names[role]]["W"]))
                getattr(self, f"{role}_b").copy_(torch.as_tensor(params[names[role]]["b"]))

    def export(self, names: Mapping[str, str] = TREE_LSTM_NAMES) -> dict[str, dict[str, np.ndarray]]:
        """The inverse of :meth:`load`: this model's weights as a graph's parameters (so that both sides of a
        benchmark start from the same weights)."""
        out = {names["embed"]: {"E": self.embed.detach().numpy().copy()}}
        for role in ("leaf", "branch", "classify"):
            out[names[role]] = {k: getattr(self, f"{role}_{k}").detach().numpy().copy() for k in ("W", "b")}
        return out

    def leaf(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Leaf cell on a vector of word ids (or one id): returns (h, c)."""
        i, o, u = (self.embed[words] @ self.leaf_W + self.leaf_b).split(self.hidden, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def branch(
        self, h_l: torch.Tensor, c_l: torch.Tensor, h_r: torch.Tensor, c_r: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Branch cell on the children's states (rows or single vectors): returns (h, c)."""
        gates = torch.cat([h_l, h_r], dim=-1) @ self.branch_W + self.branch_b
        i, f_l, f_r, o, u = gates.split(self.hidden, dim=-1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
        return torch.sigmoid(o) * torch.tanh(c), c

    def classify(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.classify_W + self.classify_b


def eager_tree_losses(model: TorchTreeLSTM, tree: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """One tree, node by node in post-order: (per-node losses, logits), both in the tree's post-order."""
    positions = tree.inputs["positions"].tolist()
    is_leaf = tree.inputs["is_leaf"].tolist()
    words = iter(tree.inputs["leaf_words"].tolist())
    states: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    hs: list[torch.Tensor] = []
    for pos, leaf in zip(positions, is_leaf, strict=True):
        if leaf:
            h, c = model.leaf(torch.tensor(next(words)))
        else:
            h_l, c_l = states.pop(2 * pos)
            h_r, c_r = states.pop(2 * pos + 1)
            h, c = model.branch(h_l, c_l, h_r, c_r)
        states[pos] = (h, c)
        hs.append(h)
    logits = model.classify(torch.stack(hs))
    labels = torch.from_numpy(tree.inputs["labels"])
    return nn.functional.cross_entropy(logits, labels, reduction="none"), logits


@dataclass(frozen=True)
class LevelPlan:
    """Index arrays that run a minibatch of trees level by level (built with numpy, once per minibatch).

    Rows of the state table: all leaves first (in tree order), then the branches of each level, deepest
    first. ``levels[k]`` = (left child rows, right child rows) of the k-th level's branches; ``node_rows``
    maps the minibatch's nodes (trees concatenated, each in post-order) to their state rows.
    """

    leaf_words: torch.Tensor
    levels: list[tuple[torch.Tensor, torch.Tensor]]
    node_rows: torch.Tensor
    node_tree: torch.Tensor  # which tree of the minibatch each node belongs to
    labels: torch.Tensor
    n_trees: int


def level_plan(trees: Sequence[Batch]) -> LevelPlan:
    positions = [t.inputs["positions"] for t in trees]
    is_leaf = np.concatenate([t.inputs["is_leaf"] for t in trees])
    tree_of = np.concatenate([np.full(p.size, k) for k, p in enumerate(positions)])
    pos = np.concatenate(positions)
    depth = np.floor(np.log2(pos)).astype(np.int64)  # exact for int64 positions below 2**52
    n = pos.size
    row = np.empty(n, dtype=np.int64)
    leaf_idx = np.flatnonzero(is_leaf)
    row[leaf_idx] = np.arange(leaf_idx.size)
    lookup = {(int(k), int(p)): i for i, (k, p) in enumerate(zip(tree_of, pos, strict=True))}
    next_row = leaf_idx.size
    levels: list[tuple[torch.Tensor, torch.Tensor]] = []
    for d in range(int(depth.max()), -1, -1):
        idx = np.flatnonzero(~is_leaf & (depth == d))
        if idx.size == 0:
            continue
        left = [row[lookup[(int(tree_of[i]), 2 * int(pos[i]))]] for i in idx]
        right = [row[lookup[(int(tree_of[i]), 2 * int(pos[i]) + 1)]] for i in idx]
        row[idx] = np.arange(next_row, next_row + idx.size)
        next_row += idx.size
        levels.append((torch.tensor(left), torch.tensor(right)))
    return LevelPlan(
        leaf_words=torch.from_numpy(np.concatenate([t.inputs["leaf_words"] for t in trees])),
        levels=levels,
        node_rows=torch.from_numpy(row),
        node_tree=torch.from_numpy(tree_of),
        labels=torch.from_numpy(np.concatenate([t.inputs["labels"] for t in trees])),
        n_trees=len(trees),
    )


def batched_tree_losses(model: TorchTreeLSTM, plan: LevelPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """A minibatch level by level: (per-node losses, logits) in the order of ``plan.node_rows``."""
    h, c = model.leaf(plan.leaf_words)
    for left, right in plan.levels:
        h_new, c_new = model.branch(h[left], c[left], h[right], c[right])
        h, c = torch.cat([h, h_new]), torch.cat([c, c_new])
    logits = model.classify(h[plan.node_rows])
    return nn.functional.cross_entropy(logits, plan.labels, reduction="none"), logits


def minibatch_loss(node_losses: torch.Tensor, node_tree: torch.Tensor, n_trees: int) -> torch.Tensor:
    """Mean over trees of each tree's mean node loss."""
    per_tree = torch.zeros(n_trees, dtype=node_losses.dtype).index_add_(0, node_tree, node_losses)
    counts = torch.bincount(node_tree, minlength=n_trees).to(node_losses.dtype)
    return (per_tree / counts).mean()


def node_tree_index(trees: Sequence[Batch]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate([np.full(t.inputs["positions"].size, k) for k, t in enumerate(trees)]))


# ---------------------------------------------------------------------------------------------------------
# GGNN

GGNN_SCALAR_NODES = ("init", "gate", "value", "readout")
GGNN_NODE_SELECTION_NODES = ("init", "score")


class TorchGGNN(nn.Module):
    """'init' Linear, one 'edge{e}' Linear per edge type, a GRUCell, the gated-sum readout and 'readout' Linear.

    ``outputs`` is the number of classes (classification) or 1 (regression). With ``node_selection`` the
    readout is instead Linear 'score' (hidden -> 1), one score per node (``models.ggsnn``'s node selection).
    """

    def __init__(
        self, n_edge_types: int, feature_width: int, hidden: int = 32, steps: int = 4, outputs: int = 1,
        seed: int = 0, dtype: torch.dtype = torch.float32, node_selection: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.hidden, self.steps, self.n_edge_types = hidden, steps, n_edge_types
        self.node_selection = node_selection
        self.scalar_nodes = GGNN_NODE_SELECTION_NODES if node_selection else GGNN_SCALAR_NODES
        self.init_W = _glorot(feature_width, hidden, gen, dtype)
        self.init_b = nn.Parameter(torch.zeros(hidden, dtype=dtype))
        self.edge_W = nn.Parameter(torch.stack([_glorot(hidden, hidden, gen, dtype) for _ in range(n_edge_types)]))
        self.edge_b = nn.Parameter(torch.zeros((n_edge_types, hidden), dtype=dtype))
        self.gru = nn.GRUCell(hidden, hidden, dtype=dtype)
        with torch.no_grad():  # torch's GRUCell initialises from the global generator: draw from ours instead
            for p in self.gru.parameters():
                p.uniform_(-1 / hidden**0.5, 1 / hidden**0.5, generator=gen)
        if node_selection:
            self.score_W = _glorot(hidden, 1, gen, dtype)
            self.score_b = nn.Parameter(torch.zeros(1, dtype=dtype))
            return
        self.gate_W = _glorot(hidden, hidden, gen, dtype)
        self.gate_b = nn.Parameter(torch.zeros(hidden, dtype=dtype))
        self.value_W = _glorot(hidden, hidden, gen, dtype)
        self.value_b = nn.Parameter(torch.zeros(hidden, dtype=dtype))
        self.readout_W = _glorot(hidden, outputs, gen, dtype)
        self.readout_b = nn.Parameter(torch.zeros(outputs, dtype=dtype))

    def load(self, params: Params) -> None:
        """Copy the parameters of a ``models.ggsnn`` graph (of this model's readout)."""
        with torch.no_grad():
            for name in self.scalar_nodes:
                getattr(self, f"{name}_W").copy_(torch.as_tensor(params[name]["W"]))
                getattr(self, f"{name}_b").copy_(torch.as_tensor(params[name]["b"]))
            for e in range(self.n_edge_types):
                if "edges" in params:  # the fused layout: the types' matrices side by side
                    block = slice(e * self.hidden, (e + 1) * self.hidden)
                    self.edge_W[e].copy_(torch.as_tensor(params["edges"]["W"][:, block]))
                    self.edge_b[e].copy_(torch.as_tensor(params["edges"]["b"][block]))
                else:
                    self.edge_W[e].copy_(torch.as_tensor(params[f"edge{e}"]["W"]))
                    self.edge_b[e].copy_(torch.as_tensor(params[f"edge{e}"]["b"]))
            self.gru.weight_ih.copy_(torch.as_tensor(params["gru_x"]["W"]).T)
            self.gru.bias_ih.copy_(torch.as_tensor(params["gru_x"]["b"]))
            self.gru.weight_hh.copy_(torch.as_tensor(params["gru_h"]["W"]).T)
            self.gru.bias_hh.copy_(torch.as_tensor(params["gru_h"]["b"]))

    def export(self, fused_edges: bool = True) -> dict[str, dict[str, np.ndarray]]:
        """The inverse of :meth:`load`: this model's weights as the parameters of a ``models.ggsnn`` graph
        (built with the same ``fused_edges``), so that both sides of a benchmark start from the same weights."""

        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy().copy()

        out = {name: {"W": arr(getattr(self, f"{name}_W")), "b": arr(getattr(self, f"{name}_b"))}
               for name in self.scalar_nodes}  # fmt: skip
        if fused_edges:
            out["edges"] = {"W": np.concatenate(list(arr(self.edge_W)), axis=1), "b": arr(self.edge_b).reshape(-1)}
        else:
            for e in range(self.n_edge_types):
                out[f"edge{e}"] = {"W": arr(self.edge_W[e]), "b": arr(self.edge_b[e])}
        out["gru_x"] = {"W": arr(self.gru.weight_ih.T), "b": arr(self.gru.bias_ih)}
        out["gru_h"] = {"W": arr(self.gru.weight_hh.T), "b": arr(self.gru.bias_hh)}
        return out

    def initial(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.init_W + self.init_b

    def gated(self, h: torch.Tensor) -> torch.Tensor:
        """Each node's term of the gated-sum readout, sigmoid(gate(h)) * tanh(value(h))."""
        return torch.sigmoid(h @ self.gate_W + self.gate_b) * torch.tanh(h @ self.value_W + self.value_b)

    def readout(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled @ self.readout_W + self.readout_b

    def score(self, h: torch.Tensor) -> torch.Tensor:
        """Node selection: one score per node, ``h`` (..., hidden) -> (...)."""
        return (h @ self.score_W + self.score_b)[..., 0]


@dataclass(frozen=True)
class DenseBatch:
    """Graphs padded to the largest N: features (B, N, F), adjacency (B, T, N, N) of [b, t, dst, src] counts."""

    features: torch.Tensor
    adjacency: torch.Tensor
    mask: torch.Tensor  # (B, N, 1): 1 for real nodes, 0 for padding


def dense_batch(graphs: Sequence[GraphInstance], n_edge_types: int, dtype: torch.dtype = torch.float32) -> DenseBatch:
    n = max(g.num_nodes for g in graphs)
    feats = np.zeros((len(graphs), n, graphs[0].feature_width))
    adj = np.zeros((len(graphs), n_edge_types, n, n))
    mask = np.zeros((len(graphs), n, 1))
    for b, g in enumerate(graphs):
        feats[b, : g.num_nodes] = g.node_features
        np.add.at(adj, (b, g.edge_types, g.edges[:, 1], g.edges[:, 0]), 1.0)
        mask[b, : g.num_nodes] = 1.0
    return DenseBatch(*(torch.as_tensor(a, dtype=dtype) for a in (feats, adj, mask)))


def dense_forward(model: TorchGGNN, batch: DenseBatch) -> torch.Tensor:
    """Graph outputs (B, outputs) by dense adjacency products; padded nodes are masked out of the readout.
    Node selection: logits (B, N) over each graph's nodes, -inf at padding (cross-entropy against local ids)."""
    bsz, n, _ = batch.features.shape
    h = model.initial(batch.features)
    for _ in range(model.steps):
        a = torch.zeros_like(h)
        for t in range(model.n_edge_types):
            a = a + batch.adjacency[:, t] @ (h @ model.edge_W[t] + model.edge_b[t])
        h = model.gru(a.reshape(bsz * n, -1), h.reshape(bsz * n, -1)).reshape(bsz, n, -1)
    if model.node_selection:
        return model.score(h).masked_fill(batch.mask[..., 0] == 0, float("-inf"))
    return model.readout((model.gated(h) * batch.mask).sum(dim=1))


@dataclass(frozen=True)
class ScatterBatch:
    """Graphs concatenated: features (sum N, F), every edge's global source, target and type, node -> graph."""

    features: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    types: torch.Tensor
    node_graph: torch.Tensor
    n_graphs: int


def scatter_batch(graphs: Sequence[GraphInstance], dtype: torch.dtype = torch.float32) -> ScatterBatch:
    offsets = np.cumsum([0] + [g.num_nodes for g in graphs])
    edges = np.concatenate([g.edges + off for g, off in zip(graphs, offsets, strict=False)]).reshape(-1, 2)
    return ScatterBatch(
        features=torch.as_tensor(np.concatenate([g.node_features for g in graphs]), dtype=dtype),
        src=torch.from_numpy(np.ascontiguousarray(edges[:, 0])),
        dst=torch.from_numpy(np.ascontiguousarray(edges[:, 1])),
        types=torch.from_numpy(np.concatenate([g.edge_types for g in graphs]).astype(np.int64)),
        node_graph=torch.from_numpy(np.repeat(np.arange(len(graphs)), np.diff(offsets))),
        n_graphs=len(graphs),
    )


def scatter_forward(model: TorchGGNN, batch: ScatterBatch) -> torch.Tensor:
    """Graph outputs (B, outputs) by gather / index_add_ over edge lists and a segment-sum readout.
    Node selection: one score per node (sum N,), for :func:`segment_cross_entropy`."""
    h = model.initial(batch.features)
    for _ in range(model.steps):
        per_type = torch.einsum("nh,thk->ntk", h, model.edge_W)  # every node's message under every edge type
        messages = per_type[batch.src, batch.types] + model.edge_b[batch.types]
        h = model.gru(torch.zeros_like(h).index_add_(0, batch.dst, messages), h)
    if model.node_selection:
        return model.score(h)
    pooled = torch.zeros((batch.n_graphs, model.hidden), dtype=h.dtype).index_add_(0, batch.node_graph, model.gated(h))
    return model.readout(pooled)


def segment_cross_entropy(
    scores: torch.Tensor, node_graph: torch.Tensor, targets: torch.Tensor, n_graphs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Node selection on concatenated graphs: (mean over graphs of the cross-entropy of a softmax over each
    graph's own node scores, number of graphs whose top-scoring node is the target); ``targets`` are rows
    of the concatenation."""
    top = torch.full((n_graphs,), float("-inf"), dtype=scores.dtype)
    top = top.scatter_reduce(0, node_graph, scores.detach(), reduce="amax")
    total = torch.zeros(n_graphs, dtype=scores.dtype).index_add_(0, node_graph, torch.exp(scores - top[node_graph]))
    loss = (torch.log(total) + top - scores[targets]).mean()
    return loss, (scores.detach()[targets] >= top).sum()
