"""What each construct of the model language compiles to, checked against torch autograd (float64).

Every model here is compiled, run on the reference interpreter (which checks the IR's invariants: one
backward per forward message, empty caches at the end of a key, invertible Isus), and compared with the
same computation written directly in torch with the same weights: the sum of the key's losses and every
parameter's gradient agree to 1e-6 relative error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook import nn
from amp_notebook.data.batch import Batch
from amp_notebook.ir.interpret import Interpreter

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-6
L, B = 5, 3


def batch(length: int = L, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(
        inputs={
            "tokens": rng.integers(0, 14, size=(length, B)),
            "tags": rng.integers(0, 3, size=(length, B)),
            "x": rng.standard_normal((B, 4)),
            "target": rng.integers(0, 3, size=B),
        },
        size=B,
        fields={"length": length},
    )


def check(graph: amp.Graph, reference: Callable[..., torch.Tensor], data: Batch, seed: int = 0) -> None:
    """The key's summed loss and every gradient equal torch's ``reference(params, inputs)``."""
    params = graph.init_params(seed, np.float64)
    interp = Interpreter(graph, params=params)
    grads = interp.gradients(data)
    loss = sum(r["loss"] for r in interp.reports)
    tparams = {n: {k: torch.tensor(v, requires_grad=True) for k, v in p.items()} for n, p in params.items()}
    inputs = {k: torch.tensor(v) for k, v in data.inputs.items()}
    expected = reference(tparams, inputs)
    expected.backward()
    assert loss == pytest.approx(expected.item(), rel=RTOL)
    assert set(grads) == set(tparams)
    for node, group in tparams.items():
        for name, value in group.items():
            want = value.grad.numpy() if value.grad is not None else np.zeros_like(grads[node][name])
            err = np.max(np.abs(grads[node][name] - want)) / max(np.max(np.abs(want)), 1e-300)
            assert err <= RTOL, f"{node}/{name}: relative error {err:.3g}"


def lin(p: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return x @ p[name]["W"] + p[name]["b"] if "b" in p[name] else x @ p[name]["W"]


# ------------------------------------------------------------------------------------------- branches
def first_step_differs(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(6)
    for t, token in enumerate(tokens):
        e = nn.embedding(token, 14, 4, name="embed")
        if t == 0:
            h = nn.tanh(nn.linear(e, 6, name="first"))
        else:
            h = nn.relu(nn.linear(nn.concat(e, h), 6, name="step"))
    return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)


def test_if_on_the_loop_counter_is_a_cond_and_a_phi() -> None:
    graph = amp.compile(first_step_differs)
    kinds = [n.kind for n in graph.nodes.values()]
    assert kinds.count("cond") >= 2 and "phi" in kinds and "sink" in kinds

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = None
        for t in range(len(x["tokens"])):
            e = p["embed"]["E"][x["tokens"][t]]
            h = torch.tanh(lin(p, "first", e)) if t == 0 else torch.relu(lin(p, "step", torch.cat([e, h], 1)))
        return F.cross_entropy(lin(p, "out", h), x["target"])

    check(graph, reference, batch())


def test_if_on_a_constant_keeps_one_branch() -> None:
    def model(x: nn.Floats(4), target: nn.Ints(), deep=False):
        if deep:
            x = nn.relu(nn.linear(x, 8, name="extra"))
        return nn.softmax_cross_entropy(nn.linear(x, 3, name="out"), target)

    assert "extra" not in amp.compile(model).nodes
    assert "extra" in amp.compile(model, deep=True).nodes
    assert not [n for n in amp.compile(model).nodes.values() if n.kind in ("cond", "phi")]


# ------------------------------------------------------------------------------ normalization, dropout
def normalized(x: nn.Floats(4), target: nn.Ints()):
    h = nn.layer_norm(nn.linear(x, 6, name="fc"), eps=1e-3, name="norm")
    h = nn.dropout(nn.relu(h), 0.3, seed=2, name="drop")
    return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)


def test_layer_norm_and_dropout_compile_from_amp_nn() -> None:
    from amp_notebook.ir import ops as O
    from amp_notebook.ir.message import State

    graph = amp.compile(normalized)
    assert graph.nodes["norm"].op == O.LayerNorm(6, eps=1e-3) and graph.nodes["drop"].op == O.Dropout(0.3, seed=2)
    data = batch()
    keep = torch.tensor(graph.nodes["drop"].op.keep("drop", State(key=0, **data.fields), (B, 6)))
    assert 0 < int(keep.sum()) < keep.numel()

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = F.layer_norm(lin(p, "fc", x["x"]), (6,), p["norm"]["g"], p["norm"]["b"], eps=1e-3)
        return F.cross_entropy(lin(p, "out", torch.relu(h) * keep / 0.7), x["target"])

    check(graph, reference, data)


def test_layer_norm_and_dropout_arguments_are_checked_by_their_ops() -> None:
    def bad_rate(x: nn.Floats(4), target: nn.Ints()):
        return nn.softmax_cross_entropy(nn.dropout(nn.linear(x, 3), p=1.5), target)

    with pytest.raises(amp.CompileError, match=r"nn.dropout: Dropout p: expected a number >= 0.0 and <= 1.0, got 1.5"):
        amp.compile(bad_rate)

    def unknown_width(x: nn.Floats(), target: nn.Ints()):
        return nn.softmax_cross_entropy(nn.layer_norm(x), target)

    with pytest.raises(amp.CompileError, match=r"nn.layer_norm: the width of x is not known here"):
        amp.compile(unknown_width)


# ---------------------------------------------------------------------------------------------- loops
def tagger(tokens: nn.Sequence(int), tags: nn.Sequence(int), target: nn.Ints()):
    """A loss at every step: the hidden state's exit is unused (it ends in a Sink)."""
    h = nn.zeros(6)
    for token, tag in zip(tokens, tags, strict=True):
        h = nn.tanh(nn.linear(nn.concat(nn.embedding(token, 14, 4, name="embed"), h), 6, name="step"))
        nn.softmax_cross_entropy(nn.linear(h, 3, name="tag"), tag)


def test_zip_loop_with_a_loss_per_step() -> None:
    graph = amp.compile(tagger)
    assert sum(n.kind == "softmax_cross_entropy" for n in graph.nodes.values()) == 1  # one node, L messages
    assert any(n.kind == "sink" for n in graph.nodes.values())

    def reference(p: dict, x: dict) -> torch.Tensor:
        h, total = torch.zeros(B, 6, dtype=torch.float64), 0
        for t in range(len(x["tokens"])):
            h = torch.tanh(lin(p, "step", torch.cat([p["embed"]["E"][x["tokens"][t]], h], 1)))
            total = total + F.cross_entropy(lin(p, "tag", h), x["tags"][t])
        return total

    check(graph, reference, batch())


def outer_context(x: nn.Floats(4), tokens: nn.Sequence(int), target: nn.Ints()):
    """``context`` is read in every iteration: it goes round the loop unchanged."""
    context = nn.tanh(nn.linear(x, 5, name="context"))
    h = nn.zeros(6)
    for i in range(len(tokens)):
        h = nn.relu(nn.linear(nn.concat(nn.embedding(tokens[i], 14, 4, name="embed"), h, context), 6, name="step"))
    return nn.softmax_cross_entropy(nn.linear(nn.concat(h, context), 3, name="out"), target)


def test_range_loop_over_a_state_bound_carries_an_outer_value() -> None:
    graph = amp.compile(outer_context)
    conds = [n.op.config()["predicate"] for n in graph.nodes.values() if n.kind == "cond"]
    assert conds == ["i < length", "i < length"]  # h and context go round, each with its own Cond

    def reference(p: dict, x: dict) -> torch.Tensor:
        context = torch.tanh(lin(p, "context", x["x"]))
        h = torch.zeros(B, 6, dtype=torch.float64)
        for t in range(len(x["tokens"])):
            h = torch.relu(lin(p, "step", torch.cat([p["embed"]["E"][x["tokens"][t]], h, context], 1)))
        return F.cross_entropy(lin(p, "out", torch.cat([h, context], 1)), x["target"])

    check(graph, reference, batch())
    check(graph, reference, batch(length=1))


def test_while_loop_on_a_counter_and_nested_loops() -> None:
    def model(tokens: nn.Sequence(int), target: nn.Ints(), depth=2):
        h = nn.zeros(6)
        for token in tokens:
            h = nn.concat(nn.embedding(token, 14, 4, name="embed"), h)
            h = nn.tanh(nn.linear(h, 6, name="step"))
            k = 0
            while k < depth:
                h = nn.relu(nn.linear(h, 6, name="deep"))
                k += 1
        return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)

    graph = amp.compile(model)
    exits = [n.op.config()["backward"] for n in graph.nodes.values() if n.kind == "isu" and "_exit" in n.name]
    assert {"k": "2"} in exits and {"t": "length"} in exits  # both counters leave the state, restored backward

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = torch.zeros(B, 6, dtype=torch.float64)
        for t in range(len(x["tokens"])):
            h = torch.tanh(lin(p, "step", torch.cat([p["embed"]["E"][x["tokens"][t]], h], 1)))
            for _ in range(2):
                h = torch.relu(lin(p, "deep", h))
        return F.cross_entropy(lin(p, "out", h), x["target"])

    check(graph, reference, batch())


def test_while_counting_down_from_a_state_value() -> None:
    def model(tokens: nn.Sequence(int), target: nn.Ints()):
        h = nn.zeros(6)
        t = len(tokens) - 1
        while t >= 0:
            h = nn.relu(nn.linear(nn.concat(nn.embedding(tokens[t], 14, 4, name="embed"), h), 6, name="step"))
            t -= 1
        return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)

    graph = amp.compile(model)
    (exit_isu,) = [n for n in graph.nodes.values() if n.kind == "isu" and "_exit" in n.name]
    assert exit_isu.op.config()["backward"] == {"t": "min(length - 1, -1)"}

    def reference(p: dict, x: dict) -> torch.Tensor:  # the rows in reverse: tokens[t] joins row t of the Ungroup
        h = torch.zeros(B, 6, dtype=torch.float64)
        for t in reversed(range(len(x["tokens"]))):
            h = torch.relu(lin(p, "step", torch.cat([p["embed"]["E"][x["tokens"][t]], h], 1)))
        return F.cross_entropy(lin(p, "out", h), x["target"])

    check(graph, reference, batch())


def test_unrolled_loop_makes_one_node_per_repetition() -> None:
    def mlp(x: nn.Floats(4), target: nn.Ints(), widths=(8, 6)):
        for width in widths:
            x = nn.relu(nn.linear(x, width, name=f"layer{width}"))
        return nn.softmax_cross_entropy(nn.linear(x, 3, name="out"), target)

    graph = amp.compile(mlp)
    assert [graph.nodes[n].op.out_features for n in ("layer8", "layer6")] == [8, 6]

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = torch.relu(lin(p, "layer6", torch.relu(lin(p, "layer8", x["x"]))))
        return F.cross_entropy(lin(p, "out", h), x["target"])

    check(graph, reference, batch())


# ----------------------------------------------------------------------------- sharing and helpers
def test_the_same_name_at_two_call_sites_shares_one_node() -> None:
    def model(x: nn.Floats(4), target: nn.Ints()):
        def block(v):
            return nn.tanh(nn.linear(v, 4, name="shared"))

        h = block(block(x))
        return nn.softmax_cross_entropy(nn.linear(h * x, 3, name="out"), target)

    graph = amp.compile(model)
    assert sorted(graph.parameterized()) == ["out", "shared"]
    assert graph.nodes["shared_route"].kind == "distribute"

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = torch.tanh(lin(p, "shared", torch.tanh(lin(p, "shared", x["x"]))))
        return F.cross_entropy(lin(p, "out", h * x["x"]), x["target"])

    check(graph, reference, batch())


def test_helpers_are_inlined_per_call_and_see_their_arguments() -> None:
    def model(x: nn.Floats(4), target: nn.Ints(), width=5):
        def layer(v, out=width):
            return nn.relu(nn.linear(v, out))

        return nn.softmax_cross_entropy(nn.linear(layer(layer(x), out=7), 3, name="out"), target)

    graph = amp.compile(model)
    widths = sorted(n.op.out_features for n in graph.nodes.values() if n.kind == "linear")
    assert widths == [3, 5, 7]


def test_lstm_cell_and_arithmetic_on_tensors() -> None:
    def model(tokens: nn.Sequence(int), target: nn.Ints()):
        h, c = nn.zeros(5, name="h0"), nn.zeros(5, name="c0")
        for token in tokens:
            h, c = nn.lstm_cell(nn.embedding(token, 14, 4, name="embed"), h, c, 5, name="lstm")
        return nn.softmax_cross_entropy(nn.linear(h - c, 3, name="out"), target)

    graph = amp.compile(model)

    def reference(p: dict, x: dict) -> torch.Tensor:
        h = c = torch.zeros(B, 5, dtype=torch.float64)
        for t in range(len(x["tokens"])):
            gates = lin(p, "lstm_gates", torch.cat([p["embed"]["E"][x["tokens"][t]], h], 1))
            i, f, g, o = gates.split(5, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return F.cross_entropy(lin(p, "out", h - c), x["target"])

    check(graph, reference, batch())


def test_nodes_record_their_source_line_and_the_graph_its_function() -> None:
    graph = amp.compile(first_step_differs)
    import inspect

    _, start = inspect.getsourcelines(first_step_differs)
    assert graph.nodes["first"].meta["line"] == start + 5
    assert all("line" in n.meta for n in graph.nodes.values())
    assert graph.compiled_from.function == "first_step_differs"


def test_compile_as_a_decorator_with_constants() -> None:
    @amp.compile(hidden=3)
    def model(x: nn.Floats(4), target: nn.Ints(), hidden=9):
        return nn.softmax_cross_entropy(nn.linear(nn.relu(nn.linear(x, hidden, name="h")), 3), target)

    assert isinstance(model, amp.Graph)
    assert model.nodes["h"].op.out_features == 3
    with pytest.raises(amp.CompileError, match="only parameters with a default"):
        amp.compile(first_step_differs, hidden=3)


# ------------------------------------------------------------------------------------------- recursion
def recursive_net(tree: nn.Tree(), root_label: nn.Ints(), width=5):
    """A recursive network in the return form, each child read on its own, a loss at the root only."""

    def node(t):
        if t.is_leaf:
            return nn.tanh(nn.linear(nn.embedding(t.word, 30, 4, name="embed"), width, name="leaf"))
        left, right = node(t.left), node(t.right)
        return nn.tanh(nn.linear(left, width, name="left") + nn.linear(right, width, name="right"))

    root = node(tree)
    return nn.softmax_cross_entropy(nn.linear(root, 3, name="out"), root_label)


def test_recursion_in_the_return_form_with_children_read_apart() -> None:
    from amp_notebook.data.sentiment import sentiment_tree_dataset

    graph = amp.compile(recursive_net)
    kinds = {n.kind for n in graph.nodes.values()}
    assert {"flatmap", "collect", "split"} <= kinds and "label_table" not in graph.nodes
    trees = sentiment_tree_dataset(n_train=4, n_val=1, seed=3)
    for tree_key in trees.train:
        table = dict(tree_key.inputs["leaf_table"].tolist())
        positions = set(tree_key.inputs["label_table"][:, 0].tolist())
        label = dict(tree_key.inputs["label_table"].tolist())[1] % 3
        data = Batch({**tree_key.inputs, "root_label": np.array([label])}, 1, tree_key.fields)

        def reference(p: dict, x: dict, table: dict = table, positions: set = positions) -> torch.Tensor:
            def visit(pos: int) -> torch.Tensor:
                if pos in table:
                    return torch.tanh(lin(p, "leaf", p["embed"]["E"][[table[pos]]]))
                assert 2 * pos in positions
                return torch.tanh(lin(p, "left", visit(2 * pos)) + lin(p, "right", visit(2 * pos + 1)))

            return F.cross_entropy(lin(p, "out", visit(1)), x["root_label"])

        check(graph, reference, data)
