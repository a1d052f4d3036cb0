"""Every op's bundled forward and backward against the same messages run one by one.

A worker may hand an op several messages for the same port at once (``forward_bundle``,
``backward_bundle``). For every gradient case of ``test_op_gradients.py`` this replays the case for three
keys, once message by message and once with the messages of each port bundled, and requires the same
outputs with the same states, the same gradients for every input message, the same parameter gradients,
and an empty cache afterwards. ``"per_message"`` ops must agree exactly; ``"rows"`` ops stack payload rows
into one matrix product, whose rounding BLAS may choose by shape, so they agree to 1e-12.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amp_notebook.ir.message import State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext
from amp_notebook.ir.ops.base import Op
from tests.ir.test_op_gradients import CASES, Case, _context

KEYS = 3
Out = tuple[str, Any, State]


def rekeyed(case: Case) -> list[list[tuple[str, np.ndarray, State]]]:
    """Per feed of the case, its message for each key (float payloads varied per key)."""
    feeds = []
    addresses = case.op.kind in ("flatmap", "partition")  # column 0 holds row addresses: keep it
    for port, x, state in case.feeds:
        per_key = []
        for k in range(KEYS):
            y = x.copy()
            if x.dtype.kind == "f":
                scaled = y[:, 1:] if addresses else y
                scaled *= 1.0 + 0.25 * k
            per_key.append((port, y, state.replace(key=state["key"] + 10 * k)))
        feeds.append(per_key)
    return feeds


def by_port(items: list[Out]) -> list[list[Out]]:
    """Items grouped by port, ports in order of first appearance (how bundles form at a node)."""
    groups: dict[str, list[Out]] = {}
    for item in items:
        groups.setdefault(item[0], []).append(item)
    return list(groups.values())


def run(case: Case, bundled: bool) -> tuple[dict[tuple[str, State], Any], dict, NodeContext]:
    params = {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}
    ctx = _context(case, params, train=True)
    op: Op = case.op
    emitted: list[Out] = []
    for messages in rekeyed(case):
        if bundled:
            port = messages[0][0]
            emitted += op.forward_bundle(ctx, port, [m[1] for m in messages], [m[2] for m in messages])
        else:
            for port, x, s in messages:
                emitted += op.forward(ctx, port, x, s)
    outputs = {(p, s): y for p, y, s in emitted}
    rng = np.random.default_rng(7)
    incoming = [
        (p, 1.0 if p == LOSS_PORT else rng.standard_normal(np.shape(y)), s)
        for p, y, s in emitted
        if p == LOSS_PORT or p in case.outputs_with_grad()
    ]
    grads: dict[tuple[str, State], Any] = {}
    for group in by_port(list(reversed(incoming))):
        counts = op.param_shapes() and group[0][0] != LOSS_PORT  # the worker counts a parameterized node's gradients
        if bundled:
            port = group[0][0]
            back = op.backward_bundle(ctx, port, [g for _, g, _ in group], [s for _, _, s in group])
            ctx.n_grads += len(group) if counts else 0
        else:
            back = []
            for p, g, s in group:
                back += op.backward(ctx, p, g, s)
                ctx.n_grads += 1 if counts else 0
        for in_port, g, s in back:
            if in_port in ctx.grad_inputs:
                assert (in_port, s) not in grads
                grads[(in_port, s)] = np.asarray(g)
    return outputs, grads, ctx


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bundle_gives_what_its_messages_give_one_by_one(case: Case) -> None:
    out1, grads1, ctx1 = run(case, bundled=False)
    out2, grads2, ctx2 = run(case, bundled=True)
    exact = case.op.bundling == "per_message"
    tol: dict[str, float] = {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": 1e-12, "atol": 1e-13}
    assert list(out1) == list(out2) or set(out1) == set(out2)
    for key, y in out1.items():
        np.testing.assert_allclose(np.asarray(out2[key], dtype=float), np.asarray(y, dtype=float), **tol, err_msg=key)
    assert set(grads1) == set(grads2)
    for key, g in grads1.items():
        np.testing.assert_allclose(grads2[key], g, **tol, err_msg=str(key))
    for name in case.params:
        np.testing.assert_allclose(ctx2.grads[name], ctx1.grads[name], rtol=1e-12, atol=1e-13, err_msg=name)
    assert not ctx2.cache and not ctx2.joins
    assert [r["loss"] for r in ctx1.reports] == pytest.approx([r["loss"] for r in ctx2.reports], rel=1e-12)
