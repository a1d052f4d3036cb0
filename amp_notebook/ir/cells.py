"""Compound cells (LSTM, GRU, Tree-LSTM leaf and branch, an LSTM loop) built from primitive IR nodes.

A cell is a builder function, not an op: it adds ordinary nodes (Linear, Split, Sigmoid, Tanh, Mul, Add,
Sub, Concat, Bcast) to the graph, so placement sees each heavy Linear on its own and every gradient is
the primitives' gradient. Each node a cell creates is named ``{name}_{part}`` and carries
``meta["cell"] = name``, so a builder UI can draw the cell collapsed into one box.

GRU and Tree-LSTM cells are *fused* by default: the heavy Linears stay separate nodes, and everything after
them (gate nonlinearities, the c/h update) is one node of a fused op (``ir.ops.fused``: ``gru_update``,
``tree_lstm_leaf``, ``tree_lstm_branch``), a few messages per step instead of twenty. ``fused=False``
builds the same math from primitives (Split, Sigmoid, Tanh, Mul, Add, Sub, Concat, Bcast), node for node
what the docstrings below write; both give the same numbers and take the same weights.

``lstm_loop`` is a whole LSTM over a sequence rather than one step: a loop (Cond, Phi, Isu) around one
recurrent Linear and the fused ``lstm_start`` / ``lstm_update`` ops, fed with the input gates of every
step, which one Linear before the loop computes for the whole sequence (the BiLSTM tagger's layers).

Fan-out is explicit, as everywhere in the IR: a value used twice passes through a Bcast. The joins
inside a cell (Concat, Add, Mul, Sub) match messages on their full state; when the inputs of a cell
arrive with different states (an embedding with ``t`` and a hidden state with ``t`` and ``length``, say)
pass ``match_on`` and every join of the cell matches on the key plus those fields instead.

Weights: a cell's Linear holds ``W`` of shape (in, gates * hidden), i.e. the transpose of torch's
``weight``, with the gates side by side in the order each docstring gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, GraphError, Ref


@contextmanager
def _cell(g: Graph, name: str) -> Iterator[None]:
    """Tag every node created inside the block with ``meta["cell"] = name``."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"cell name: expected a non-empty string, got {name!r}")
    before = set(g.nodes)
    yield
    for node_name, node in g.nodes.items():
        if node_name not in before:
            node.meta["cell"] = name


def _positive(cell: str, what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GraphError(f"{cell} {what}: expected a positive int, got {value!r}")
    return value


def _input_width(g: Graph, cell: str, x: Ref, in_features: int | None) -> int:
    width = g.width(x) if in_features is None else in_features
    if width is None:
        raise GraphError(f"{cell}: the width of input {x} is not known yet; pass in_features=...")
    return _positive(cell, "in_features", width)


def lstm_cell(
    g: Graph,
    x: Ref,
    h: Ref,
    c: Ref,
    hidden: int,
    name: str,
    in_features: int | None = None,
    match_on: Sequence[str] | None = None,
) -> tuple[Ref, Ref]:
    """An LSTM step; returns ``(h', c')``. With gates in torch.nn.LSTMCell's order (i, f, g, o)::

        [i, f, g, o] = [x; h] @ W + b            one Linear '{name}_gates', W: (in + hidden, 4 hidden)
        i, f, o = sigmoid(i), sigmoid(f), sigmoid(o);   g = tanh(g)
        c' = f * c + i * g
        h' = o * tanh(c')

    torch's ``weight_ih`` (4H, in) and ``weight_hh`` (4H, H) are ``W.T`` split by rows, and its two
    biases sum to ``b``.
    """
    hidden = _positive("lstm_cell", "hidden", hidden)
    width = _input_width(g, "lstm_cell", x, in_features)
    with _cell(g, name):
        xh = g.concat(x, h, name=f"{name}_xh", match_on=match_on)
        gates = g.linear(xh, 4 * hidden, name=f"{name}_gates", in_features=width + hidden)
        i, f, u, o = g.split(gates, [hidden] * 4, name=f"{name}_split")
        i = g.sigmoid(i, name=f"{name}_i")
        f = g.sigmoid(f, name=f"{name}_f")
        u = g.tanh(u, name=f"{name}_g")
        o = g.sigmoid(o, name=f"{name}_o")
        kept = g.mul(f, c, name=f"{name}_fc", match_on=match_on)
        written = g.mul(i, u, name=f"{name}_ig", match_on=match_on)
        c_new = g.add(kept, written, name=f"{name}_c", match_on=match_on)
        c_out, c_read = g.bcast(c_new, 2, name=f"{name}_c_fanout")
        h_new = g.mul(o, g.tanh(c_read, name=f"{name}_tanh_c"), name=f"{name}_h", match_on=match_on)
    return h_new, c_out


def gru_cell(
    g: Graph,
    x: Ref,
    h: Ref | tuple[Ref, Ref],
    hidden: int,
    name: str,
    in_features: int | None = None,
    match_on: Sequence[str] | None = None,
    fused: bool = True,
) -> Ref:
    """A GRU step; returns ``h'``. With gates in torch.nn.GRUCell's order (r, z, n)::

        [xr, xz, xn] = x @ W_x + b_x             Linear '{name}_x', W_x: (in, 3 hidden)
        [hr, hz, hn] = h @ W_h + b_h             Linear '{name}_h', W_h: (hidden, 3 hidden)
        r = sigmoid(xr + hr);   z = sigmoid(xz + hz)
        n = tanh(xn + r * hn)                    the reset gate scales h's term including its bias, as torch
        h' = (1 - z) * n + z * h   computed as   n + z * (h - n)

    Two Linears, not one over [x; h], because r multiplies only h's part. torch's ``weight_ih`` and
    ``bias_ih`` are ``W_x.T`` and ``b_x``; ``weight_hh`` and ``bias_hh`` are ``W_h.T`` and ``b_h``.
    Fused, the rest is one GRUUpdate '{name}_update' joining ``x @ W_x + b_x``, ``h @ W_h + b_h`` and h.

    h is read twice (by '{name}_h' and by the update), so the cell fans it out through a Bcast
    '{name}_h_fanout'. A caller that fans h out anyway passes two of its copies instead, ``(h_linear, h_update)``,
    and saves that Bcast and its messages (the GG-NN's 'h_fanout' feeds the edges and the cell in one Bcast).
    """
    hidden = _positive("gru_cell", "hidden", hidden)
    width = _input_width(g, "gru_cell", x, in_features)
    if isinstance(h, tuple) and (len(h) != 2 or not all(isinstance(r, Ref) for r in h)):
        raise GraphError(f"gru_cell {name!r} h: expected a Ref or two Refs (copies of h), got {h!r}")
    with _cell(g, name):
        h_in, h_skip = h if isinstance(h, tuple) else g.bcast(h, 2, name=f"{name}_h_fanout")
        from_x = g.linear(x, 3 * hidden, name=f"{name}_x", in_features=width)
        from_h = g.linear(h_in, 3 * hidden, name=f"{name}_h", in_features=hidden)
        if fused:
            update = O.GRUUpdate(hidden, match_on=None if match_on is None else tuple(match_on))
            return Ref(g.add_node(update, [from_x, from_h, h_skip], name=f"{name}_update").name, "out")
        xr, xz, xn = g.split(from_x, [hidden] * 3, name=f"{name}_x_split")
        hr, hz, hn = g.split(from_h, [hidden] * 3, name=f"{name}_h_split")
        r = g.sigmoid(g.add(xr, hr, name=f"{name}_r_in", match_on=match_on), name=f"{name}_r")
        z = g.sigmoid(g.add(xz, hz, name=f"{name}_z_in", match_on=match_on), name=f"{name}_z")
        reset = g.mul(r, hn, name=f"{name}_rh", match_on=match_on)
        n = g.tanh(g.add(xn, reset, name=f"{name}_n_in", match_on=match_on), name=f"{name}_n")
        n_base, n_diff = g.bcast(n, 2, name=f"{name}_n_fanout")
        step = g.sub(h_skip, n_diff, name=f"{name}_h_minus_n", match_on=match_on)
        update = g.mul(z, step, name=f"{name}_zd", match_on=match_on)
        h_new = g.add(n_base, update, name=f"{name}_out", match_on=match_on)
    return h_new


def lstm_loop(g: Graph, rows: Ref, hidden: int, name: str, counter: str, last: str, every_step: bool) -> Ref:
    """An LSTM over a sequence: a stream of input-gate rows ``x_t @ W_x + b`` (n, 4 hidden), one message per
    step with state ``counter`` = 0, 1, ... (an Ungroup's output), ``last`` an expression for the last
    step's counter (``"length - 1"``). Returns the states [h; c] (n, 2 hidden) of every step, one message
    per step with its counter (``every_step``), or only the last step's. Gates (i, f, g, o) as
    torch.nn.LSTMCell::

        rows -> Cond '{name}_first' on ``t == 0``
                  true  -> LSTMStart '{name}_start' (the zero state) -> Phi '{name}_loop' <----------------+
                  false -> LSTMUpdate '{name}_update' (x_gates)                                            |
        Phi -> Cond '{name}_more' on ``t < last``: false -> out (the last step)                            |
               true -> [Bcast '{name}_fanout': a copy out] -> Isu '{name}_tick' (t + 1) -> Split h, c      |
                       -> Linear '{name}_h' (h @ W_h, no bias) and c -> LSTMUpdate (h_gates, c) -----------+

    Every branch of every Cond carries a gradient back (the last step leaves through the false branch,
    every step's copy through the Phi '{name}_out'), so each forward message gets its backward. torch's
    ``weight_hh`` is ``W_h.T``; its ``weight_ih`` and both biases belong to the Linear that made the rows.
    """
    with _cell(g, name):
        first, later = g.cond(rows, f"{counter} == 0", name=f"{name}_first")
        start = g.add_node(O.LSTMStart(hidden), [first], name=f"{name}_start")
        states = g.phi(Ref(start.name), None, name=f"{name}_loop")
        more, done = g.cond(states, f"{counter} < {last}", name=f"{name}_more")
        out_step: Ref | None = None
        if every_step:
            more, out_step = g.bcast(more, 2, name=f"{name}_fanout")
        following = g.isu(more, {counter: f"{counter} + 1"}, {counter: f"{counter} - 1"}, name=f"{name}_tick")
        h, c = g.split(following, [hidden, hidden], name=f"{name}_hc")
        h_gates = g.linear(h, 4 * hidden, name=f"{name}_h", in_features=hidden, bias=False)
        update = g.add_node(O.LSTMUpdate(hidden), [later, h_gates, c], name=f"{name}_update")
        g.connect(Ref(update.name), states.node, "in1")
        if out_step is None:
            return done
        return g.phi(out_step, done, name=f"{name}_out")


def tree_lstm_leaf(g: Graph, x: Ref, hidden: int, name: str, in_features: int | None = None, fused: bool = True) -> Ref:
    """A Tree-LSTM leaf: an input vector x -> the node state [h; c] (width 2 hidden). Gates (i, o, u)::

        [i, o, u] = x @ W + b                    Linear '{name}_gates', W: (in, 3 hidden)
        c = sigmoid(i) * tanh(u)
        h = sigmoid(o) * tanh(c)

    (A leaf has no children, so no forget gates and no recurrent term.) Fused, the rest is one
    TreeLSTMLeaf '{name}_cell'.
    """
    hidden = _positive("tree_lstm_leaf", "hidden", hidden)
    width = _input_width(g, "tree_lstm_leaf", x, in_features)
    with _cell(g, name):
        gates = g.linear(x, 3 * hidden, name=f"{name}_gates", in_features=width)
        if fused:
            return Ref(g.add_node(O.TreeLSTMLeaf(hidden), [gates], name=f"{name}_cell").name, "out")
        i, o, u = g.split(gates, [hidden] * 3, name=f"{name}_split")
        c = g.mul(g.sigmoid(i, name=f"{name}_i"), g.tanh(u, name=f"{name}_u"), name=f"{name}_c")
        c_out, c_read = g.bcast(c, 2, name=f"{name}_c_fanout")
        h = g.mul(g.sigmoid(o, name=f"{name}_o"), g.tanh(c_read, name=f"{name}_tanh_c"), name=f"{name}_h")
        state = g.concat(h, c_out, name=f"{name}_hc")
    return state


def tree_lstm_branch(g: Graph, children: Ref, hidden: int, name: str, fused: bool = True) -> Ref:
    """A binary Tree-LSTM branch (Tai et al. 2015, N-ary with N = 2): the children's states
    [h_l; c_l; h_r; c_r] (width 4 hidden, as a Collect of two [h; c] gives) -> [h; c] (width 2 hidden).
    Gates (i, f_l, f_r, o, u), each reading both children::

        [i, f_l, f_r, o, u] = [h_l; h_r] @ W + b     Linear '{name}_gates', W: (2 hidden, 5 hidden)
        c = sigmoid(i) * tanh(u) + sigmoid(f_l) * c_l + sigmoid(f_r) * c_r
        h = sigmoid(o) * tanh(c)

    Fused, the rest is one TreeLSTMBranch '{name}_cell' joining the gates with c_l and c_r.
    """
    hidden = _positive("tree_lstm_branch", "hidden", hidden)
    with _cell(g, name):
        h_l, c_l, h_r, c_r = g.split(children, [hidden] * 4, name=f"{name}_children")
        hh = g.concat(h_l, h_r, name=f"{name}_hh")
        gates = g.linear(hh, 5 * hidden, name=f"{name}_gates", in_features=2 * hidden)
        if fused:
            return Ref(g.add_node(O.TreeLSTMBranch(hidden), [gates, c_l, c_r], name=f"{name}_cell").name, "out")
        i, f_l, f_r, o, u = g.split(gates, [hidden] * 5, name=f"{name}_split")
        written = g.mul(g.sigmoid(i, name=f"{name}_i"), g.tanh(u, name=f"{name}_u"), name=f"{name}_iu")
        kept_l = g.mul(g.sigmoid(f_l, name=f"{name}_f_l"), c_l, name=f"{name}_fc_l")
        kept_r = g.mul(g.sigmoid(f_r, name=f"{name}_f_r"), c_r, name=f"{name}_fc_r")
        c = g.add(g.add(written, kept_l, name=f"{name}_c_partial"), kept_r, name=f"{name}_c")
        c_out, c_read = g.bcast(c, 2, name=f"{name}_c_fanout")
        h = g.mul(g.sigmoid(o, name=f"{name}_o"), g.tanh(c_read, name=f"{name}_tanh_c"), name=f"{name}_h")
        state = g.concat(h, c_out, name=f"{name}_hc")
    return state
