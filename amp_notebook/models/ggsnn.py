"""The gated graph neural network (GG-NN, Li et al. 2016) of the paper's bAbI-15 and QM9 experiments.

How one static graph runs every graph
-------------------------------------
A key is one graph, or a bucket of K graphs as their disjoint union (:func:`~amp_notebook.data.graphs.ggsnn_bucket`:
node rows stacked, edges shifted, ``node_graph`` naming each row's graph). Its node states ``h`` (N, hidden)
travel as ONE message, and the graph's structure travels as int index payloads, so nothing in the IR
depends on N, on K or on the edges::

    node_features (N, F) -> Linear 'init' -> Isu 'start' (t = 0) -> Phi 'loop' <---------------------+
      -> Bcast 'h_fanout' (3 copies)                                                                   |
           Linear 'edges' (every node's message under every edge type, (N, T * hidden))                |
           -> TypedEdgeSum 'propagate' (messages, typed_edges[t]) -> a (N, hidden)                     |
           gru_cell 'gru' (x = a, h: two of the copies, so the cell adds no Bcast of its own) -> h'    |
      -> Isu 'tick' (t + 1) -> Cond 'more' on ``t < steps`` -- true ---------------------------------+
                                                           -- false -> readout -> loss

'propagate' takes for each edge (u -> v) of type e the block e of u's row and adds it into v's row: a
Gather, a per-type Linear and a ScatterSum per edge type, in two nodes and two messages a step (the
torch scatter baseline's einsum-then-gather). The index payload ``typed_edges`` arrives as a (steps, 2, E)
array (rows ``src * T + type`` and ``dst``, tiled once per step, see
:func:`amp_notebook.data.graphs.ggsnn_bucket`) and passes through an Ungroup with counter ``t``, exactly
as the RNN's tokens do: step t's TypedEdgeSum joins the index message whose state equals the node
states' state (key, ..., t). The number of steps is a literal in the Cond's predicate, so the data must
be built with the same ``steps``.

With ``fused_edges=False`` the step is spelled out per edge type (more nodes that placement can spread,
and many more messages)::

           for each edge type e:
             Gather 'gather{e}' (h, src{e}[t]) -> Linear 'edge{e}' (message per edge)
             -> ScatterSum 'scatter{e}' (messages, dst{e}[t], like=h)  (summed into destinations)
           Add 'sum{e}' chain over types -> a (N, hidden)

with index payloads ``src{e}`` / ``dst{e}`` (steps, E_e). An edge type with no edges in a graph (E_e = 0)
sends empty index vectors: the Gather gives (0, hidden), the Linear (0, hidden) and the ScatterSum zeros.

Readouts
--------
* ``classification`` / ``regression``: the gated sum of Li et al., per graph,
  ``r = sum_v sigmoid(gate(h_v)) * tanh(value(h_v))`` (Linears 'gate' and 'value', hidden -> hidden, then
  Mul 'gated' and ScatterSum 'sum_nodes', which adds each node's row into its graph's row by the input
  ``node_graph``; the input ``graphs``, zeros (K, 1), only gives the row count), then Linear 'readout'
  (hidden -> classes, or 1) -> SoftmaxCrossEntropy or MSE 'loss' against ``target`` (K,), a mean over
  the key's graphs.
* ``node_selection`` (Li et al.'s bAbI answer): a score per node, Linear 'score' (hidden -> 1), and
  SegmentSoftmaxCrossEntropy 'loss': a softmax over each graph's own nodes (by ``node_graph``) against
  ``target`` (K,), each graph's answer row in the union; graphs of a key may differ in size.

Weights (each Linear holds ``W`` (in, out) = torch ``weight.T`` and ``b``): 'init' (F, hidden);
'edges' (hidden, T * hidden) = the edge types' (hidden, hidden) matrices side by side, or one 'edge{e}'
(hidden, hidden) per type, applied to each edge's source row, its bias added once per edge; the GRU's
'gru_x' (hidden, 3 hidden) on ``a`` and 'gru_h' (hidden, 3 hidden) on ``h``, gates (r, z, n) as
torch.nn.GRUCell (see :func:`amp_notebook.ir.cells.gru_cell`); readout 'gate', 'value', 'readout' or 'score'.
"""

from __future__ import annotations

from amp_notebook.data.graphs import TASKS
from amp_notebook.ir.cells import gru_cell
from amp_notebook.ir.graph import Graph, GraphError, Ref


def ggsnn(
    n_edge_types: int,
    feature_width: int,
    hidden: int = 32,
    steps: int = 4,
    task: str = "classification",
    classes: int | None = None,
    fused_edges: bool = True,
) -> Graph:
    """A GG-NN over ``steps`` propagation steps; inputs as built by :func:`~amp_notebook.data.graphs.ggsnn_bucket`.

    ``fused_edges``: all edge types in one Linear 'edges' and one TypedEdgeSum 'propagate' (default), or
    (False) one Gather, Linear 'edge{e}' and ScatterSum per edge type, summed by Adds.
    """
    if task not in TASKS:
        raise GraphError(f"ggsnn task: expected one of {TASKS}, got {task!r}")
    if task == "classification" and (classes is None or classes < 2):
        raise GraphError(f"ggsnn classes: task 'classification' needs classes >= 2, got {classes!r}")
    for what, value in (("n_edge_types", n_edge_types), ("feature_width", feature_width), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphError(f"ggsnn {what}: expected a positive int, got {value!r}")
    g = Graph(f"ggsnn_{task}")
    h0 = g.linear(g.input("node_features", width=feature_width), hidden, name="init")
    h0 = g.isu(h0, forward={"t": "0"}, backward={"t": None}, name="start")
    h = g.phi(h0, None, name="loop")
    if fused_edges:
        to_edges, to_gru_h, to_gru_update = g.bcast(h, 3, name="h_fanout")
        typed_edges = g.ungroup(g.input("typed_edges", dtype="int"), counter="t", name="typed_edges_steps")
        every_type = g.linear(to_edges, n_edge_types * hidden, name="edges", in_features=hidden)
        incoming = g.typed_edge_sum(every_type, typed_edges, n_edge_types, name="propagate")
        return _finish(g, incoming, (to_gru_h, to_gru_update), hidden, steps, task, classes)
    copies = g.bcast(h, 2 * n_edge_types + 2, name="h_fanout")
    incoming: Ref | None = None
    for e in range(n_edge_types):
        src = g.ungroup(g.input(f"src{e}", dtype="int"), counter="t", name=f"src{e}_steps")
        dst = g.ungroup(g.input(f"dst{e}", dtype="int"), counter="t", name=f"dst{e}_steps")
        messages = g.linear(g.gather(copies[2 * e], src, name=f"gather{e}"), hidden, name=f"edge{e}")
        summed = g.scatter_sum(messages, dst, copies[2 * e + 1], name=f"scatter{e}")
        incoming = summed if incoming is None else g.add(incoming, summed, name=f"sum{e}")
    assert incoming is not None
    return _finish(g, incoming, (copies[-2], copies[-1]), hidden, steps, task, classes)


def _finish(
    g: Graph, incoming: Ref, h: tuple[Ref, Ref], hidden: int, steps: int, task: str, classes: int | None
) -> Graph:
    """The GRU update (``h``: two copies of the node states, for the cell's Linear and its update), the loop back
    while ``t < steps``, then the readout and the loss."""
    h_new = gru_cell(g, incoming, h, hidden, name="gru", in_features=hidden)
    h_new = g.isu(h_new, forward={"t": "t + 1"}, backward={"t": "t - 1"}, name="tick")
    again, final = g.cond(h_new, f"t < {steps}", name="more")
    g.connect(again, "loop", "in1")

    if task == "node_selection":
        scores = g.linear(final, 1, name="score")
        segments = g.input("node_graph", dtype="int")
        g.segment_softmax_cross_entropy(scores, segments, g.input("target", dtype="int"), name="loss", match_on=())
        return g
    to_gate, to_value = g.bcast(final, 2, name="final_fanout")
    gate = g.sigmoid(g.linear(to_gate, hidden, name="gate"), name="gate_sigmoid")
    value = g.tanh(g.linear(to_value, hidden, name="value"), name="value_tanh")
    gated = g.mul(gate, value, name="gated")
    per_graph = g.zeros("graphs", 1)  # (K, 1): one row per graph of the key
    pooled = g.scatter_sum(gated, g.input("node_graph", dtype="int"), per_graph, name="sum_nodes", match_on=())
    if task == "classification":
        assert classes is not None
        logits = g.linear(pooled, classes, name="readout")
        g.softmax_cross_entropy(logits, g.input("target", dtype="int"), name="loss", match_on=("key",))
    else:
        prediction = g.linear(pooled, 1, name="readout")
        g.mse(prediction, g.input("target", width=1), name="loss", match_on=("key",))
    return g
