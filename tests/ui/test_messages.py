"""Browser messages with junk fields, wrong types or out-of-range values are refused with a message and
change nothing: the builder's intents (graph, positions, undo history, revision) and the dashboard's
controls (the run's settings and state)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from amp_notebook.data import Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir.serialize import graph_to_dict
from amp_notebook.ui.builder_model import BuilderError, BuilderModel
from amp_notebook.ui.messages import CONTROLS, DASHBOARD_MESSAGES, INTENTS, refusal


def model_state(m: BuilderModel) -> tuple[Any, ...]:
    return graph_to_dict(m.graph), dict(m.positions), len(m._undo), len(m._redo), m.revision, m.workers


JUNK_INTENTS = [
    ({"type": "connect", "src": "x", "src_port": "out", "dst": "linear1", "dst_port": "in", "sql": "drop"},
     "unknown field(s) 'sql'"),
    ({"type": "connect", "src": 5, "src_port": "out", "dst": "linear1", "dst_port": "in"},
     "src: expected a string (1 to 256 characters), found 5"),
    ({"type": "connect", "src": "x"}, "missing required field(s) 'src_port', 'dst', 'dst_port'"),
    ({"type": "add_node", "kind": ["relu"]}, "kind: expected a string"),
    ({"type": "add_node", "kind": "relu", "position": [1, 2, 3]}, "position: expected canvas coordinates"),
    ({"type": "add_node", "kind": "relu", "position": {"x": 1}}, "position"),
    ({"type": "add_node", "kind": "relu", "config": "width=3"}, "config: expected an object {...} or null"),
    ({"type": "add_node", "kind": "relu", "exec": "import os"}, "unknown field(s) 'exec'"),
    ({"type": "move", "positions": {"linear1": [math.nan, 0.0]}}, "positions.linear1[0]: expected a number, found nan"),
    ({"type": "move", "positions": [["linear1", 1, 2]]}, "positions: expected an object {...}"),
    ({"type": "layout", "positions": {"linear1": "here"}}, "positions.linear1"),
    ({"type": "delete", "nodes": "linear1"}, "nodes: expected a list [...]"),
    ({"type": "delete", "edges": [["linear1"]]}, "edges[0]: expected at least 2 items, found 1"),
    ({"type": "set_property", "node": "linear1", "field": "out_features"}, "missing required field(s) 'value'"),
    ({"type": "set_property", "node": "linear1", "field": "out_features", "value": "9" * 20_000},
     "value: expected a string or a number"),
    ({"type": "undo", "steps": 5}, "unknown field(s) 'steps'"),
    ({"type": "load_model", "model": {"name": "mlp"}}, "model: expected a string"),
    ({"type": "auto_place", "strategy": "random"}, 'expected one of "round_robin", "balanced"'),
    ({"type": "pin", "nodes": [], "worker": 1}, "nodes: expected at least 1 item, found 0"),
    ({"type": "set_workers", "workers": 10**9}, "workers: expected an integer from 1 to 256, found 1000000000"),
    ({"type": "set_workers", "workers": True}, "workers"),
    ({"type": "exec", "code": "print(1)"}, "unknown intent 'exec'"),
    ({"type": ["undo"]}, "unknown intent list"),
    ({"intent": "undo"}, "unknown intent None"),
    ("undo", "intent refused: expected an object with a 'type', found str"),
    (None, "found NoneType"),
    ({"type": "set_property", "node": "linear1", "field": "name", "value": [[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]},
     "nested at most 16 deep"),
]  # fmt: skip


@pytest.mark.parametrize(("intent", "message"), JUNK_INTENTS, ids=[str(i) for i in range(len(JUNK_INTENTS))])
def test_junk_intents_are_refused_with_a_message_and_change_nothing(intent: Any, message: str) -> None:
    m = BuilderModel()
    m.load_model("mlp")
    m.move({"x": (1.0, 2.0)})
    before = model_state(m)
    with pytest.raises(BuilderError) as info:
        m.apply(intent)
    assert message in str(info.value)
    assert model_state(m) == before


def test_every_intent_kind_has_a_handler_and_a_schema_with_its_parameters() -> None:
    """Each intent's schema names exactly its handler's parameters (plus, where the handler takes **kwargs, the
    node attributes or cell fields it accepts), so a new handler parameter cannot be refused as junk."""
    import inspect

    from amp_notebook.ui import builder_schema as S
    from amp_notebook.ui.builder_model import ATTRS, DIRECTIONS

    assert set(INTENTS) == set(BuilderModel._HANDLERS)
    for kind, handler in BuilderModel._HANDLERS.items():
        params = list(inspect.signature(handler).parameters.values())[1:]
        named = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        extra = set(INTENTS[kind]["properties"]) - {"type"} - named
        assert named <= set(INTENTS[kind]["properties"]), f"{kind}: the schema lacks {named - set(INTENTS[kind])}"
        if any(p.kind == p.VAR_KEYWORD for p in params):
            allowed = (
                set(ATTRS) - {"name"} if kind == "add_node" else {f for c in S.CELLS.values() for f in c["fields"]}
            )
            assert extra == allowed, kind
        else:
            assert not extra, f"{kind}: the schema allows {extra}, which the handler does not take"
    assert INTENTS["auto_layout"]["properties"]["direction"]["enum"] == [*DIRECTIONS, None]


def test_python_callers_may_use_tuples_and_numpy_ints() -> None:
    m = BuilderModel()
    m.apply({"type": "add_node", "kind": "input", "name": "x", "config": {"width": 4}, "position": (1, 2)})
    m.apply({"type": "move", "positions": {"x": (np.float32(3.5), np.int64(4))}})
    m.apply({"type": "set_property", "node": "x", "field": "worker", "value": np.int64(1)})
    assert m.positions["x"] == (3.5, 4.0) and m.graph.nodes["x"].worker == 1


def test_refused_edits_inside_the_builder_come_back_as_builder_errors() -> None:
    """Errors of every layer below (GraphError, OpError, PlacementError...) reach the caller as BuilderError."""
    m = BuilderModel()
    m.load_model("rnn")
    before = model_state(m)
    for intent in (
        {"type": "connect", "src": "tokens", "src_port": "out", "dst": "nowhere", "dst_port": "in"},
        {"type": "set_property", "node": "out", "field": "in_features", "value": "-3"},
        {"type": "set_property", "node": "more", "field": "predicate", "value": "__import__('os')"},
        {"type": "load_model", "model": "resnet"},
        {"type": "set_workers", "workers": "0"},
    ):
        with pytest.raises(BuilderError):
            m.apply(intent)
    assert model_state(m) == before
    with pytest.raises(BuilderError, match="expected a Graph or its JSON dict"):
        m.load("not a graph")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match=r"load has 2 problems:\n  - nodes\[0\]: missing required field"):
        m.load({"schema": "amp_notebook.graph", "version": 1, "nodes": [{"name": 1}], "edges": []})
    assert model_state(m) == before


def test_the_widget_refuses_junk_envelopes() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui import GraphBuilder

    b = GraphBuilder()
    b.load_model("mlp")
    before = model_state(b.model)
    for content in (
        {"type": "intent"},
        {"type": "intent", "intent": {"type": "undo"}, "also": "junk"},
        {"type": "export", "format": "pickle"},
        {"type": "train", "data": "/etc/passwd"},
        {"type": "shell", "cmd": "ls"},
        ["intent"],
    ):
        b._on_msg(b, content, [])  # type: ignore[arg-type]
        assert (b.notice["level"] == "error" and "refused" in b.notice["text"]) or "unknown" in b.notice["text"]
    assert model_state(b.model) == before
    with pytest.raises(BuilderError, match="not valid JSON"):
        b.load("{not json")
    assert model_state(b.model) == before


# ------------------------------------------------------------------------------------------- dashboard
JUNK_CONTROLS = [
    ({"type": "control", "action": "max_active_keys", "value": 0}, "value: expected an integer from 1 to 1000000"),
    ({"type": "control", "action": "max_active_keys", "value": 10**12}, "value: expected an integer from 1 to"),
    ({"type": "control", "action": "max_active_keys", "value": 2.5}, "found 2.5"),
    ({"type": "control", "action": "max_active_keys", "value": "8"}, "found the string '8'"),
    ({"type": "control", "action": "max_active_keys"}, "missing required field(s) 'value'"),
    ({"type": "control", "action": "max_active_keys", "value": 3, "node": "x"}, "unknown field(s) 'node'"),
    ({"type": "control", "action": "min_update_frequency", "value": 2, "node": ["linear1"]}, "node: expected"),
    ({"type": "control", "action": "pause", "value": 1}, "unknown field(s) 'value'"),
    ({"type": "control", "action": "stop", "force": True}, "unknown field(s) 'force'"),
    ({"type": "control", "action": ["stop"]}, "action: expected one of"),
    ({"type": "control", "action": "explode"}, "found the string 'explode'"),
    ({"type": "control"}, "missing required field(s) 'action'"),
    ({"type": "export", "download": "yes"}, "download: expected true or false"),
    ({"type": "export", "path": "/etc/passwd"}, "unknown field(s) 'path'"),
    ({"type": "ready", "now": 1}, "unknown field(s) 'now'"),
    ({"type": "checkpoint", "path": "/etc/passwd"}, "unknown field(s) 'path'"),  # Python picks where it saves
    ({"type": "exec"}, "unknown dashboard message 'exec'"),
    ("pause", "expected an object with a 'type'"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "message"), JUNK_CONTROLS, ids=[str(i) for i in range(len(JUNK_CONTROLS))])
def test_junk_dashboard_messages_are_refused_by_the_schemas(content: Any, message: str) -> None:
    problem = refusal("dashboard message", content)
    if problem is None and content["type"] == "control":
        problem = refusal("control", content, field="action")
    assert problem is not None and message in problem


class _RecordingRun:
    """Stands in for a Run: records which of its controls the dashboard called, with what."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, *args))


def test_every_control_the_schemas_accept_reaches_the_run() -> None:
    """Each action with a schema is one the dashboard carries out (none is refused later as unknown)."""
    pytest.importorskip("anywidget")
    from amp_notebook.ui.dashboard import Dashboard

    assert set(DASHBOARD_MESSAGES) == {"ready", "export", "checkpoint", "control"}  # checkpoint: its own test
    dash = Dashboard(mode="replay")
    dash._run = run = _RecordingRun()  # type: ignore[assignment]
    for action, schema in CONTROLS.items():
        message = {"type": "control", "action": action, **({"value": 2} if "value" in schema["required"] else {})}
        dash._on_msg(dash, message, [])
    assert not dash.errors
    assert [call[0] for call in run.calls] == [
        "pause", "resume", "stop", "set_max_active_keys", "set_min_update_frequency", "set_max_bundle"
    ]  # fmt: skip
    assert run.calls[-1] == ("set_max_bundle", None, 2)
    dash.close()


def test_junk_controls_change_nothing_in_a_live_run(digits: Dataset) -> None:
    pytest.importorskip("anywidget")
    from tests.ui.test_dashboard_feed import Captured, background

    run = background(digits)
    dash = Captured(run, rate_hz=2)
    try:
        before = (run.status["max_active_keys"], run.status["min_update_frequency"], run.state)
        for content, _ in JUNK_CONTROLS:
            dash._on_msg(dash, content, [])
        errors = [m["message"] for m in dash.messages if m.get("type") == "error"]
        assert len(errors) == len(JUNK_CONTROLS) == len(dash.errors)
        assert (run.status["max_active_keys"], run.status["min_update_frequency"], run.state) == before
        assert run.state == "running"
        dash._on_msg(dash, {"type": "control", "action": "max_active_keys", "value": 3}, [])
        assert run.status["max_active_keys"] == 3  # a good request still works
    finally:
        run.stop()
        dash.close()


def test_controls_in_python_are_amp_errors_too() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui.dashboard import ControlError, Dashboard, NoRunError

    dash = Dashboard(mode="replay")
    with pytest.raises(NoRunError, match="there is no run"):
        dash.control("pause")
    assert issubclass(ControlError, AmpError) and issubclass(NoRunError, RuntimeError)
    dash.close()
