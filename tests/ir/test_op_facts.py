"""An op's facts live on the op: every kind declares how it bundles and what a message costs in FLOPs.

Adding an op touches its own file and its tests; this guard fails if a new op forgets a declaration that a
runtime or the simulator would otherwise fill with a silent default (a missing table entry once made
``Sub`` free in the simulator).
"""

from __future__ import annotations

import pytest

from amp_notebook.ir.ops import OPS
from amp_notebook.ir.ops.base import BUNDLINGS, Op


@pytest.mark.parametrize("kind", sorted(OPS))
def test_every_op_declares_its_bundling_and_flops(kind: str) -> None:
    cls = OPS[kind]
    assert cls.bundling in BUNDLINGS, f"op {kind!r} declares bundling {cls.bundling!r}; expected one of {BUNDLINGS}"
    if cls.bundling == "rows":
        assert cls.forward_bundle is not Op.forward_bundle, f"{kind!r} says 'rows' but runs per message"
    assert cls.element_flops is not None or cls.flops is not Op.flops, (
        f"op {kind!r} declares no FLOP count: set element_flops = (forward, backward) per payload element, or "
        "override flops()"
    )


def test_elementwise_math_costs_something_and_routing_costs_nothing() -> None:
    for kind in ("relu", "tanh", "sigmoid", "add", "sub", "mul", "softmax_cross_entropy", "mse", "tree_lstm_leaf"):
        assert OPS[kind].element_flops is not None and OPS[kind].element_flops[0] > 0, kind
    for kind in ("cond", "phi", "isu", "concat", "split", "bcast", "collect", "flatmap", "gather"):
        assert OPS[kind].element_flops == (0.0, 0.0), kind
