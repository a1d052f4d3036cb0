"""The compile step: every zoo graph fits the native state layout and has no expression the native form
refuses; the tables route by port index as the plan routes by port name."""

from __future__ import annotations

import pytest

from amp_notebook import models
from amp_notebook.engine.plan import MAX_SLOTS, check, compile_tables, state_layout
from amp_notebook.engine.specs import native_kernel
from amp_notebook.ir.ops import Input, Isu, Linear
from amp_notebook.runtime.plan import compile_plan

ZOO = {
    "mlp": models.mlp,
    "rnn": models.rnn,
    "tree_lstm": lambda: models.tree_lstm(vocab_size=20),
    "ggsnn": lambda: models.ggsnn(n_edge_types=3, feature_width=4, classes=3),
    "ggsnn_selection": lambda: models.ggsnn(n_edge_types=3, feature_width=4, task="node_selection"),
    "bilstm_tagger": lambda: models.bilstm_tagger(vocab_size=20, char_vocab_size=10, num_tags=5),
}


@pytest.mark.parametrize("name", list(ZOO))
def test_every_zoo_graph_compiles_for_the_native_engine(name: str) -> None:
    graph = ZOO[name]()
    names = list(graph.nodes)
    support = check(names, [graph.nodes[n].op for n in names])
    assert support.native, support.reasons
    assert support.layout[:2] == ("key", "flush") and len(support.layout) <= MAX_SLOTS
    assert set(support.bridged) == {n for n in names if not native_kernel(graph.nodes[n].op)}


def test_the_layout_holds_every_field_written_or_read_and_the_datasets() -> None:
    ops = [Isu({"t": "t + 1", "u": None}, {"t": "t - 1", "u": "0"}), Linear(2, 3)]
    assert state_layout(ops, {"length"}) == ("key", "flush", "length", "t", "u")


def test_too_many_fields_keep_a_graph_on_the_python_engine() -> None:
    fields = {f"f{i}" for i in range(MAX_SLOTS)}
    support = check(["x"], [Input(2)], fields)
    assert not support.native and "slots" in support.reasons[0]


def test_tables_route_by_port_index() -> None:
    graph = models.mlp(input_width=4, hidden=5, classes=3, layers=2)
    plan = compile_plan(graph, {n: 0 for n in graph.nodes}, workers=1)
    tables = compile_tables(plan)
    for i, op in enumerate(plan.ops):
        outs, ins = list(op.output_ports()), list(op.input_ports())
        for k, port in enumerate(outs):
            dst = plan.fwd_route[i].get(port)
            expected = (-1, -1) if dst is None else (dst[0], list(plan.ops[dst[0]].input_ports()).index(dst[1]))
            assert tables.fwd_route[i][k] == expected
        for k, port in enumerate(ins):
            src = plan.bwd_route[i].get(port)
            expected = (-1, -1) if src is None else (src[0], list(plan.ops[src[0]].output_ports()).index(src[1]))
            assert tables.bwd_route[i][k] == expected
            assert bool(tables.grad_inputs[i] >> k & 1) == (port in plan.grad_inputs[i])
    assert tables.bridged == []
