"""LayerNorm and Dropout: LayerNorm equals torch in float64; Dropout's mask is the documented function of the
message, the same in every executor and every process; both are in the palette, the schema and the runtime.

(Their backward against finite differences and their bundles are cases of ``test_op_gradients.py`` and
``test_op_bundles.py``; ``amp.nn`` and ``from_torch`` are in ``tests/compiler``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.ir import ops as O
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.ir.ops.dropout import message_base, uniforms
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict
from amp_notebook.runtime.reference import train_reference


# ----------------------------------------------------------------------------------------------- LayerNorm
def test_layer_norm_equals_torch_in_float64() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 6)) * rng.uniform(0.01, 30.0, (2, 5, 1)) + 4.0
    g, b, dy = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal((2, 5, 6))
    op = O.LayerNorm(6, eps=1e-3)
    ctx = NodeContext("ln", {"g": g.copy(), "b": b.copy()})
    ctx.grad_inputs = frozenset({"in"})
    ((_, y, s),) = op.forward(ctx, "in", x, State(key=0))
    ((_, dx, _),) = op.backward(ctx, "out", dy, s)

    tx = torch.tensor(x, requires_grad=True)
    tg, tb = torch.tensor(g, requires_grad=True), torch.tensor(b, requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx, (6,), tg, tb, eps=1e-3)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ctx.grads["g"], tg.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ctx.grads["b"], tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_layer_norm_starts_as_torch_does_and_checks_its_width() -> None:
    params = O.LayerNorm(4).init_params(np.random.default_rng(0), np.dtype(np.float32))
    assert params["g"].tolist() == [1.0] * 4 and params["b"].tolist() == [0.0] * 4
    assert params["g"].dtype == np.float32
    with pytest.raises(O.OpError, match="LayerNorm input 'in': expected width 4, got 5"):
        O.LayerNorm(4).infer_widths({"in": 5})
    with pytest.raises(O.OpError, match=r"LayerNorm eps: expected a number > 0.0, got 0"):
        O.LayerNorm(4, eps=0)
    g = amp.Graph("g")
    ln = g.layer_norm(g.input("x", width=7), name="ln")
    assert g.nodes["ln"].op == O.LayerNorm(7) and g.width(ln) == 7
    assert "layer_norm" in O.PARAMETERIZED and "layer_norm" not in O.HEAVY


# ------------------------------------------------------------------------------------------------- Dropout
def splitmix64(z: int) -> int:
    """The reference mix, in plain Python integers (what a native engine reimplements)."""
    mask = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_the_mask_is_the_documented_counter_based_hash() -> None:
    base = message_base(3, "drop", State(key=7, t=2))
    expected = [splitmix64((base + (i + 1) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)) >> 11 for i in range(50)]
    np.testing.assert_array_equal(uniforms(base, 50), np.array(expected, dtype=np.float64) * 2.0**-53)
    keep = O.Dropout(0.4, seed=3).keep("drop", State(key=7, t=2), (5, 10))
    np.testing.assert_array_equal(keep.ravel(), np.array(expected) * 2.0**-53 >= 0.4)


@pytest.mark.slow  # a fresh interpreter imports the package: seconds
def test_the_mask_is_the_same_in_another_process() -> None:
    """Python randomizes str hashes per process; the mask depends on none of them."""
    code = (
        "from amp_notebook.ir.ops.dropout import message_base; from amp_notebook.ir.message import State; "
        "print(message_base(1, 'd', State(key=4, word='x', t=(1, 2))))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert int(out.stdout) == message_base(1, "d", State(key=4, word="x", t=(1, 2)))


def test_dropout_drops_at_its_rate_scales_what_it_keeps_and_passes_validation_keys() -> None:
    x = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    op, ctx = O.Dropout(0.3), NodeContext("drop")
    ((_, y, _),) = op.forward(ctx, "in", x, State(key=0))
    kept = y != 0
    assert 0.68 < kept.mean() < 0.72  # 10,000 draws: 0.70 within about 4.4 standard deviations
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-6)
    ctx.train = False
    ((_, v, _),) = op.forward(ctx, "in", x, State(key=0))
    assert v is x
    ctx.train = True
    masks = {
        (key, t, node, seed): O.Dropout(0.5, seed).keep(node, State(key=key, t=t), (64,)).tobytes()
        for key in (0, 1) for t in (0, 1) for node in ("a", "b") for seed in (0, 1)
    }  # fmt: skip
    assert len(set(masks.values())) == len(masks)  # every key, step, node and seed has its own mask
    assert O.Dropout(0.5).keep("a", State(key=0, t=0), (64,)).tobytes() == masks[(0, 0, "a", 0)]
    ((_, none, _),) = O.Dropout(1.0).forward(ctx, "in", x, State(key=0))
    assert not none.any()


def dropout_graph() -> amp.Graph:
    """Dropout on the inputs (nothing before it learns) and between layers, a LayerNorm, a loss."""
    g = amp.Graph("dropout")
    h = g.dropout(g.input("x", width=6), p=0.25, name="drop_in")
    h = g.tanh(g.layer_norm(g.linear(h, 8, name="fc1"), name="ln"))
    h = g.dropout(h, p=0.5, name="drop_h", seed=3)
    g.softmax_cross_entropy(g.linear(h, 3, name="out"), g.input("target", dtype="int"), name="loss")
    return g


def keys(n: int, seed: int) -> list[Batch]:
    rng = np.random.default_rng(seed)
    return [Batch({"x": rng.standard_normal((5, 6)), "target": rng.integers(0, 3, 5)}, 5) for _ in range(n)]


def test_dropout_on_inputs_gets_a_backward_so_training_keys_drop() -> None:
    graph = dropout_graph()
    interp = Interpreter(graph, seed=0)
    batch = keys(1, 1)[0]
    train_loss = interp.run_key(batch, key=0, train=True)[0]["loss"]
    assert interp.receives_backward["drop_in"] and interp.receives_backward["drop_h"]
    no_drop = graph_without_dropout()
    clean = Interpreter(no_drop, params=interp.params()).run_key(batch, key=0, train=False)[0]["loss"]
    assert interp.run_key(batch, key=0, train=False)[0]["loss"] == pytest.approx(clean, rel=1e-12)
    assert train_loss != pytest.approx(clean, rel=1e-6)  # the training key dropped


def graph_without_dropout() -> amp.Graph:
    g = amp.Graph("no_dropout")
    h = g.tanh(g.layer_norm(g.linear(g.input("x", width=6), 8, name="fc1"), name="ln"))
    g.softmax_cross_entropy(g.linear(h, 3, name="out"), g.input("target", dtype="int"), name="loss")
    return g


@pytest.mark.parametrize("backend", ["threads", "simulated"])
def test_every_backend_trains_dropout_and_layer_norm_as_the_interpreter(backend: str) -> None:
    data = Dataset("dropout", keys(6, 2), keys(2, 3))
    graph = dropout_graph()
    start = graph.init_params(0, np.float64)
    interp = Interpreter(graph, params=start)
    epochs = train_reference(interp, data, epochs=2, seed=4)
    result = amp.train(graph, data, workers=2, mode="sync", epochs=2, seed=4, dtype="float64", params=start,
                       backend=backend)  # fmt: skip
    for node, group in interp.params().items():
        for name, value in group.items():
            np.testing.assert_allclose(result.params[node][name], value, rtol=1e-10, err_msg=f"{node}/{name}")
    ours = sorted((r["key"], r["loss"]) for e in epochs for r in e["reports"] if not r["train"])
    assert len(ours) == 4 and all(np.isfinite(loss) for _, loss in ours)


# --------------------------------------------------------------------------- palette, schema, graph files
def test_both_are_in_the_palette_and_the_schema_and_round_trip_through_json() -> None:
    from amp_notebook.ir.schema import graph_schema
    from amp_notebook.ui import builder_schema as S

    entries = {e["kind"]: e for e in S.palette()}
    assert entries["layer_norm"]["group"] == "payload" and entries["layer_norm"]["parameterized"] is True
    assert [(f["name"], f["type"], f["default"]) for f in entries["layer_norm"]["fields"]] == [
        ("width", "int", 64), ("eps", "number", 1e-5),
    ]  # fmt: skip
    assert [(f["name"], f["type"], f["default"]) for f in entries["dropout"]["fields"]] == [
        ("p", "number", 0.5), ("seed", "int", 0),
    ]  # fmt: skip
    defs = graph_schema()["$defs"]
    assert defs["config_dropout"]["properties"]["p"] == {
        "type": "number", "minimum": 0.0, "maximum": 1.0,
        "description": "the probability of zeroing an element (training keys only)",
    }  # fmt: skip
    assert defs["config_layer_norm"]["required"] == ["width"]
    graph = dropout_graph()
    text = json.dumps(graph_to_dict(graph))
    rebuilt = graph_from_dict(json.loads(text))
    assert [n.op for n in rebuilt.nodes.values()] == [n.op for n in graph.nodes.values()]
    bad = json.loads(text)
    bad["nodes"][1]["config"]["p"] = 1.5
    with pytest.raises(amp.GraphFileError, match=r"config.p: expected a number from 0.0 to 1.0, found 1.5"):
        graph_from_dict(bad)


def test_the_builder_makes_and_edits_both_from_text() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui.builder_model import BuilderModel

    model = BuilderModel(amp.Graph("built"))
    x = model.add_node("input", name="x", config={"width": "5"})
    ln = model.add_node("layer_norm", name="ln", config={"width": "5", "eps": "1e-3"})
    drop = model.add_node("dropout", name="drop", config={"p": "0.2"})
    model.connect(x, "out", ln, "in")
    model.connect(ln, "out", drop, "in")
    assert model.graph.nodes["ln"].op == O.LayerNorm(5, eps=1e-3)
    model.set_property(drop, "p", "0.35")
    assert model.graph.nodes["drop"].op == O.Dropout(0.35)
    with pytest.raises(amp.AmpError, match="expected a number"):
        model.set_property(drop, "p", "half")
    with pytest.raises(amp.AmpError, match=r"Dropout p: expected a number >= 0.0 and <= 1.0, got 2.0"):
        model.set_property(drop, "p", "2")
