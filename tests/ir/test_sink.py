"""A Sink ends a value that went through control flow: its producer gets the one backward it waits for."""

from __future__ import annotations

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.ir.interpret import Interpreter, InvariantError
from amp_notebook.runtime.reference import train_reference


def routed(end: str) -> amp.Graph:
    """Odd keys take the Cond's false branch, which ends in ``end`` (a sink or a discard)."""
    g = amp.Graph(f"routed_{end}")
    h = g.tanh(g.linear(g.input("x", width=3), 4, name="shared"))
    keep, drop = g.cond(h, "key % 2 == 0", name="even")
    target, no_target = g.cond(g.input("target", dtype="int"), "key % 2 == 0", name="even_target")
    g.softmax_cross_entropy(g.linear(keep, 2, name="out"), target, name="loss")
    getattr(g, end)(drop, name="end")
    g.discard(no_target, name="unused_target")  # integer labels carry no gradient: a Discard is enough
    return g


def key(seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch({"x": rng.standard_normal((5, 3)), "target": rng.integers(0, 2, 5)}, 5)


def test_a_sink_answers_every_message_with_a_zero_gradient() -> None:
    graph = routed("sink")
    graph.validate(require_loss=True)
    interp = Interpreter(graph, seed=0)
    odd = interp.gradients(key(1), key=1)  # the interpreter checks one backward per forward message
    assert all(np.all(v == 0) for group in odd.values() for v in group.values())
    even = interp.gradients(key(2), key=2)
    assert np.any(even["shared"]["W"] != 0)


def test_a_discard_after_a_cond_leaves_a_message_without_its_backward() -> None:
    with pytest.raises(InvariantError, match="backward never came"):
        Interpreter(routed("discard"), seed=0).gradients(key(1), key=1)


def test_a_sink_alone_is_not_a_loss_to_train_on() -> None:
    g = amp.Graph("only_a_sink")
    g.sink(g.linear(g.input("x", width=3), 2))
    with pytest.raises(amp.ValidationError, match="no loss"):
        g.validate(require_loss=True)


def test_sinks_train_on_the_threaded_runtime_as_in_the_interpreter() -> None:
    data = Dataset("routed", [key(s) for s in range(6)], [key(9)])
    graph = routed("sink")
    start = graph.init_params(0, np.float64)
    interp = Interpreter(graph, params=start)
    train_reference(interp, data, epochs=1, seed=2)
    result = amp.train(graph, data, workers=2, mode="sync", epochs=1, seed=2, dtype="float64", params=start)
    for node, group in interp.params().items():
        for name, value in group.items():
            np.testing.assert_allclose(result.params[node][name], value, rtol=1e-12)
