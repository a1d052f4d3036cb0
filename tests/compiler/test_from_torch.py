"""``amp.from_torch``: torch models in with their weights, the same gradients, and trained weights back out.

The round trip trains one epoch in sync mode with plain SGD on the threaded runtime and compares the
weights written back into the torch module with the same epoch trained by torch itself (float64).
"""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook.interop.torch import TorchImportError
from amp_notebook.ir.interpret import Interpreter
from tests.conftest import digits_dataset

torch = pytest.importorskip("torch")
tnn = torch.nn
F = torch.nn.functional

RTOL = 1e-6


def recurrent(kind: str) -> tnn.Module:
    torch.manual_seed(3)
    if kind == "rnn_relu":
        return tnn.RNN(5, 7, batch_first=True, nonlinearity="relu").double()
    if kind == "rnn_no_bias":
        return tnn.RNN(5, 7, batch_first=True, bias=False).double()
    return getattr(tnn, kind.upper())(5, 7, batch_first=True).double()


def head() -> tnn.Module:
    torch.manual_seed(4)
    return tnn.Sequential(tnn.Linear(7, 6), tnn.Tanh(), tnn.Linear(6, 3)).double()


def torch_loss(modules: list[tnn.Module], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if isinstance(modules[0], tnn.RNNBase):
        out, _ = modules[0](x)
        h = out[:, -1]
        rest = modules[1:]
    else:
        h, rest = x, modules
    for m in rest:
        h = m(h)
    return F.cross_entropy(h, y)


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    err = np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), 1e-300)
    assert err <= RTOL, f"{what}: relative error {err:.3g}"


@pytest.mark.parametrize("kind", ["rnn", "rnn_relu", "rnn_no_bias", "gru", "lstm"])
def test_recurrent_import_gives_torch_loss_and_gradients(kind: str) -> None:
    modules = [recurrent(kind), head()]
    imported = amp.from_torch(modules)
    assert "def torch_model(x: nn.Sequence(float, width=5)" in imported.source
    torch.manual_seed(5)
    x, y = torch.randn(4, 6, 5, dtype=torch.float64), torch.randint(0, 3, (4,))
    interp = Interpreter(imported.graph, params=imported.params)
    grads = interp.gradients(imported.batch(x, y))
    loss = torch_loss(modules, x, y)
    loss.backward()
    assert interp.reports[0]["loss"] == pytest.approx(loss.item(), rel=RTOL)
    assert len(imported.bindings) == sum(1 for m in modules for _ in m.parameters())
    for b in imported.bindings:
        ours = grads[b.node][b.key]
        assert_close(ours.T if b.transpose else ours, getattr(b.module, b.attr).grad.numpy(), f"{b.node}/{b.key}")


def mlp() -> tnn.Module:
    torch.manual_seed(6)
    return tnn.Sequential(
        tnn.Linear(64, 32),
        tnn.ReLU(),
        tnn.Linear(32, 16),
        tnn.Sigmoid(),
        tnn.Identity(),
        tnn.Linear(16, 10, bias=False),
    ).double()


def train_torch_epoch(modules: list[tnn.Module], keys: list[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
    """Plain SGD, p -= lr * grad after every key (written out: torch.optim imports torch._dynamo, seconds here)."""
    params = [p for m in modules for p in m.parameters()]
    for x, y in keys:
        torch_loss(modules, x, y).backward()
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad
                p.grad = None


def digits_keys(n: int) -> tuple[np.ndarray, np.ndarray]:
    data = digits_dataset()
    xs = np.concatenate([b.inputs["x"] for b in data.train[:n]])
    ys = np.concatenate([b.inputs["target"] for b in data.train[:n]])
    return xs, ys


def round_trip(modules: list[tnn.Module], x: np.ndarray, y: np.ndarray, batch_size: int, lr: float) -> None:
    """One epoch of SGD in sync mode, ours then torch's, from the same weights; the written-back weights agree."""
    theirs = copy.deepcopy(modules)
    imported = amp.from_torch(modules if len(modules) > 1 else modules[0])
    data = imported.dataset(x, y, batch_size=batch_size)
    result = amp.train(
        imported.graph,
        data,
        workers=2,
        mode="sync",
        epochs=1,
        shuffle=False,
        dtype="float64",
        params=imported.params,
        optimizer={"name": "sgd", "lr": lr},
    )
    before = {k: v.clone() for m in modules for k, v in m.state_dict().items()}
    returned = imported.to_torch(result.params)
    assert returned is (modules if len(modules) > 1 else modules[0]) or returned == modules
    keys = [
        (torch.tensor(x[i : i + batch_size]), torch.tensor(y[i : i + batch_size])) for i in range(0, len(x), batch_size)
    ]
    train_torch_epoch(theirs, keys, lr)
    for ours_m, theirs_m in zip(modules, theirs, strict=True):
        for (name, got), (_, want) in zip(ours_m.state_dict().items(), theirs_m.state_dict().items(), strict=True):
            assert not torch.equal(got, before[name]) or name.startswith("__"), f"{name} did not change"
            assert_close(got.numpy(), want.numpy(), name)


def test_sequential_round_trip_equals_a_torch_epoch() -> None:
    x, y = digits_keys(6)
    round_trip([mlp()], x, y, batch_size=100, lr=0.2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_round_trip_equals_a_torch_epoch(kind: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 6, 5))
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64) + (x[:, -1, 1] > 0)
    round_trip([recurrent(kind), head()], x, y, batch_size=8, lr=0.3)


def test_to_torch_writes_the_imported_weights_back_unchanged_and_checks_shapes() -> None:
    model = mlp()
    before = copy.deepcopy(model.state_dict())
    imported = amp.from_torch(model)
    imported.to_torch()
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name])
    bad = {n: {k: v[:1] for k, v in p.items()} for n, p in imported.params.items()}
    with pytest.raises(TorchImportError, match="shape"):
        imported.to_torch(bad)


def test_mse_loss_and_the_python_form_in_the_builder() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui import GraphBuilder

    imported = amp.from_torch(tnn.Sequential(tnn.Linear(4, 3), tnn.Tanh()), loss="mse")
    assert "return nn.mse(h, target)" in imported.source and "target: nn.Floats(3)" in imported.source
    text = GraphBuilder(imported.graph).to_python(form="source")
    assert imported.source.strip() in text


def test_layer_norm_and_dropout_import_with_torch_gradients_under_the_same_mask() -> None:
    from amp_notebook.ir.message import State

    torch.manual_seed(7)
    model = tnn.Sequential(
        tnn.Linear(5, 6), tnn.LayerNorm(6, eps=1e-4), tnn.ReLU(), tnn.Dropout(0.4), tnn.Linear(6, 3)
    ).double()
    imported = amp.from_torch(model)
    assert "h = nn.layer_norm(h, eps=0.0001, name='layer1')" in imported.source
    assert "h = nn.dropout(h, p=0.4)" in imported.source
    x, y = torch.randn(4, 5, dtype=torch.float64), torch.randint(0, 3, (4,))
    interp = Interpreter(imported.graph, params=imported.params)
    key = imported.batch(x, y)
    grads = interp.gradients(key)  # a training key: key 0, dropped
    (drop,) = [n for n in imported.graph.nodes.values() if n.kind == "dropout"]
    keep = torch.tensor(drop.op.keep(drop.name, State(key=0), (4, 6)))
    loss = F.cross_entropy(model[4](model[2](model[1](model[0](x))) * keep / 0.6), y)
    loss.backward()
    assert interp.reports[0]["loss"] == pytest.approx(loss.item(), rel=RTOL)
    assert {(b.node, b.key, b.attr) for b in imported.bindings} >= {("layer1", "g", "weight"), ("layer1", "b", "bias")}
    for b in imported.bindings:
        ours = grads[b.node][b.key]
        assert_close(ours.T if b.transpose else ours, getattr(b.module, b.attr).grad.numpy(), f"{b.node}/{b.key}")
    model.eval()  # a validation key is torch's eval mode: no dropout
    (report,) = interp.run_key(key, key=1, train=False)
    assert report["loss"] == pytest.approx(F.cross_entropy(model(x), y).item(), rel=RTOL)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: tnn.GRU(5, 7, num_layers=2, batch_first=True), "num_layers=2"),
        (lambda: tnn.LSTM(5, 7, batch_first=True, bidirectional=True), "bidirectional"),
        (lambda: tnn.RNN(5, 7), "batch_first=False"),
        (lambda: tnn.Sequential(tnn.Linear(4, 4), tnn.BatchNorm1d(4)), "BatchNorm1d; supported are nn.Linear"),
        (lambda: tnn.Sequential(tnn.Linear(4, 4), tnn.LayerNorm(4, elementwise_affine=False)), "has no weight"),
        (lambda: tnn.Sequential(tnn.Linear(4, 4), tnn.LayerNorm(4, bias=False)), "has no bias"),
        (lambda: tnn.Sequential(tnn.Linear(4, 6), tnn.LayerNorm((2, 3))), r"weight of shape \(2, 3\)"),
        (lambda: tnn.Sequential(tnn.Linear(4, 4), tnn.GRU(4, 4, batch_first=True)), "must come first"),
        (lambda: tnn.Sequential(tnn.Linear(4, 4), tnn.Linear(5, 2)), "reads 5 features"),
        (lambda: tnn.Conv1d(2, 2, 3), "nn.Linear"),
    ],
)
def test_unsupported_modules_are_refused_by_name(make, match: str) -> None:
    with pytest.raises(TorchImportError, match=match):
        amp.from_torch(make())


@pytest.mark.slow
def test_importing_amp_notebook_does_not_import_torch() -> None:
    code = "import amp_notebook, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
