"""The reference interpreter's gradients equal torch autograd on the same networks with the same weights.

Everything runs in float64 and is compared with a relative error of at most 1e-6 (in practice ~1e-15).
The torch networks are written independently from the IR: ``nn.Linear`` (weight = W.T), ``nn.RNN`` with
``nonlinearity='relu'`` (W_ih = W[:emb].T, W_hh = W[emb:].T, b_ih = b, b_hh = 0), ``nn.Embedding`` and
``F.cross_entropy`` (mean over the key's instances).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from amp_notebook import models  # noqa: E402
from amp_notebook.ir.interpret import Interpreter  # noqa: E402
from tests.conftest import digits_dataset, lists_dataset  # noqa: E402

RTOL = 1e-6
HIDDEN = 16
EMB = 8


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = max(float(np.max(np.abs(expected))), 1e-12)
    err = float(np.max(np.abs(actual - expected))) / scale
    assert err <= RTOL, f"{what}: relative error {err:.3g} > {RTOL}"


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def torch_linear(p: dict[str, np.ndarray]) -> nn.Linear:
    W = p["W"]
    lin = nn.Linear(W.shape[0], W.shape[1], bias=True).double()
    with torch.no_grad():
        lin.weight.copy_(t64(W.T))
        lin.bias.copy_(t64(p["b"]))
    return lin


# --------------------------------------------------------------------------------------------- MLP


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(batch_size=64)


def test_mlp_gradients_and_loss_match_torch(digits):
    g = models.mlp(input_width=64, hidden=32)
    params = g.init_params(3, np.float64)
    interp = Interpreter(g, params=params, dtype=np.float64)
    batch = digits.train[2]
    grads = interp.gradients(batch)
    (report,) = [r for r in interp.reports if r["key"] == 0]

    layers = [torch_linear(params[f"linear{i}"]) for i in range(1, 5)]
    h = t64(batch.inputs["x"])
    for lin in layers[:-1]:
        h = torch.relu(lin(h))
    logits = layers[-1](h)
    target = torch.tensor(batch.inputs["target"], dtype=torch.long)
    loss = F.cross_entropy(logits, target)
    loss.backward()

    assert abs(report["loss"] - loss.item()) <= RTOL * abs(loss.item())
    assert report["n"] == batch.size
    assert report["correct"] == int((logits.argmax(dim=1) == target).sum())
    assert set(grads) == {f"linear{i}" for i in range(1, 5)}
    for i, lin in enumerate(layers, start=1):
        assert_close(grads[f"linear{i}"]["W"], lin.weight.grad.numpy().T, f"linear{i}.W")
        assert_close(grads[f"linear{i}"]["b"], lin.bias.grad.numpy(), f"linear{i}.b")
        # the parameters themselves are untouched by gradients()
        np.testing.assert_array_equal(interp.params()[f"linear{i}"]["W"], params[f"linear{i}"]["W"])


def test_mlp_gradients_of_several_keys_are_independent(digits):
    """gradients() zeroes between calls: the second key's gradient does not include the first's."""
    g = models.mlp(input_width=64, hidden=32)
    params = g.init_params(4, np.float64)
    interp = Interpreter(g, params=params, dtype=np.float64)
    interp.gradients(digits.train[0], key=0)
    second = interp.gradients(digits.train[1], key=1)
    fresh = Interpreter(g, params=params, dtype=np.float64).gradients(digits.train[1], key=1)
    for name in second:
        for k in second[name]:
            np.testing.assert_array_equal(second[name][k], fresh[name][k])


# --------------------------------------------------------------------------------------------- RNN


def torch_rnn_grads(
    params: dict[str, dict[str, np.ndarray]], step: str, tokens: np.ndarray, target: np.ndarray
) -> tuple[float, dict[str, dict[str, np.ndarray]]]:
    """Loss and gradients of nn.Embedding -> nn.RNN(relu) -> nn.Linear on the final hidden state."""
    E = params["embed"]["E"]
    W, b = params[step]["W"], params[step]["b"]
    emb_dim, hidden = E.shape[1], W.shape[1]
    assert W.shape[0] == emb_dim + hidden

    embed = nn.Embedding(E.shape[0], emb_dim).double()
    rnn = nn.RNN(emb_dim, hidden, nonlinearity="relu", bias=True).double()  # time-major by default
    out = torch_linear(params["out"])
    with torch.no_grad():
        embed.weight.copy_(t64(E))
        rnn.weight_ih_l0.copy_(t64(W[:emb_dim].T))
        rnn.weight_hh_l0.copy_(t64(W[emb_dim:].T))
        rnn.bias_ih_l0.copy_(t64(b))
        rnn.bias_hh_l0.zero_()

    ids = torch.tensor(tokens, dtype=torch.long)  # (length, batch)
    h0 = torch.zeros(1, tokens.shape[1], hidden, dtype=torch.float64)
    _, h_last = rnn(embed(ids), h0)
    logits = out(h_last[0])
    loss = F.cross_entropy(logits, torch.tensor(target, dtype=torch.long))
    loss.backward()

    W_grad = np.concatenate([rnn.weight_ih_l0.grad.numpy().T, rnn.weight_hh_l0.grad.numpy().T], axis=0)
    grads = {
        "embed": {"E": embed.weight.grad.numpy().copy()},
        step: {"W": W_grad, "b": rnn.bias_ih_l0.grad.numpy().copy()},
        "out": {"W": out.weight.grad.numpy().T.copy(), "b": out.bias.grad.numpy().copy()},
    }
    return loss.item(), grads


@pytest.fixture(scope="module")
def lists():
    return lists_dataset(n_train=600, n_val=10, bucket_size=20, seed=1)


def one_bucket_per_length(dataset, lengths):
    found = {}
    for batch in dataset.train:
        length = batch.fields["length"]
        if length in lengths and length not in found:
            found[length] = batch
    assert sorted(found) == sorted(lengths), f"dataset lacks buckets of lengths {set(lengths) - set(found)}"
    return [found[n] for n in lengths]


@pytest.mark.parametrize("length", [2, 3, 5, 7, 10])
def test_rnn_gradients_match_torch(lists, length):
    (batch,) = one_bucket_per_length(lists, [length])
    tokens, target = batch.inputs["tokens"], batch.inputs["target"]
    assert tokens.shape == (length, batch.size)

    g = models.rnn(hidden=HIDDEN, embedding_dim=EMB)
    params = g.init_params(11, np.float64)
    interp = Interpreter(g, params=params, dtype=np.float64)
    grads = interp.gradients(batch, key=0)
    (report,) = interp.reports

    loss, expected = torch_rnn_grads(params, "step", tokens, target)
    assert abs(report["loss"] - loss) <= RTOL * abs(loss)
    assert set(grads) == {"embed", "step", "out"}
    for name, per in expected.items():
        for k, v in per.items():
            assert_close(grads[name][k], v, f"{name}.{k} (length {length})")
    # the step's bias gradient is that of b_ih alone (b_hh is fixed at zero on the torch side)
    assert np.any(grads["step"]["b"] != 0)


def step_replicas_with_gradients(grads, replicas):
    return [i for i in range(replicas) if any(np.any(v != 0) for v in grads[f"step{i}"].values())]


@pytest.mark.parametrize("key", [0, 1, 2, 5])
def test_rnn_replicas_only_routed_replica_gets_gradients(lists, key):
    """With replicas=2 exactly one step replica, step{key % 2}, takes part in a key; its gradients equal
    torch's, the other replica's are exactly zero, and keys of the same parity share a replica."""
    batch = one_bucket_per_length(lists, [6])[0]
    g = models.rnn(hidden=HIDDEN, embedding_dim=EMB, replicas=2)
    params = g.init_params(5, np.float64)
    # start the replicas apart, so that gradients taken through the wrong replica's weights would show
    params["step1"] = {k: v + 0.05 * np.sign(v) for k, v in params["step1"].items()}
    interp = Interpreter(g, params=params, dtype=np.float64)
    grads = interp.gradients(batch, key=key)
    assert set(grads) == {"embed", "step0", "step1", "out"}

    (routed_index,) = step_replicas_with_gradients(grads, 2)
    assert routed_index == key % 2
    routed, other = f"step{routed_index}", f"step{1 - routed_index}"
    for k in ("W", "b"):
        assert np.all(grads[other][k] == 0), f"{other}.{k} got a gradient for key {key} routed to {routed}"
    # the replica is a function of key % 2 alone
    twin = Interpreter(g, params=params, dtype=np.float64).gradients(batch, key=key + 2)
    assert step_replicas_with_gradients(twin, 2) == [routed_index]
    flipped = Interpreter(g, params=params, dtype=np.float64).gradients(batch, key=key + 1)
    assert step_replicas_with_gradients(flipped, 2) == [1 - routed_index]

    loss, expected = torch_rnn_grads(params, routed, batch.inputs["tokens"], batch.inputs["target"])
    (report,) = interp.reports
    assert abs(report["loss"] - loss) <= RTOL * abs(loss)
    for name, per in expected.items():
        for k, v in per.items():
            assert_close(grads[name][k], v, f"{name}.{k} (key {key})")


@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_rnn_replica_route_is_key_mod_replicas(lists, replicas):
    """``Graph.replicate`` documents a Cond on ``key % replicas``: key k runs through replica k % replicas
    (``step{k % replicas}``), for every replica count alike."""
    batch = lists.train[0]
    g = models.rnn(hidden=HIDDEN, embedding_dim=EMB, replicas=replicas)
    interp = Interpreter(g, params=g.init_params(0, np.float64), dtype=np.float64)
    routed = {key: step_replicas_with_gradients(interp.gradients(batch, key=key), replicas) for key in range(6)}
    assert routed == {key: [key % replicas] for key in range(6)}
