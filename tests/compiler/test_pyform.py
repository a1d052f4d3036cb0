"""Compiled graphs in the builder, and written back as the Python they came from."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import amp_notebook as amp
from amp_notebook import models
from amp_notebook.compiler.pyform import python_form, structure
from amp_notebook.models import as_python


def run_written(text: str, tmp_path: Path, name: str = "written_model.py") -> amp.Graph:
    """Run written code as a file (so amp.compile can read the function's source) and return its ``g``."""
    path = tmp_path / name
    path.write_text(text)
    return runpy.run_path(str(path))["g"]


def test_compiled_form_reruns_to_the_same_graph(tmp_path: Path) -> None:
    graph = amp.compile(as_python.rnn, hidden=32)
    text = python_form(graph)
    assert "def rnn(tokens: nn.Sequence(int)" in text and "for token in tokens:" in text
    assert "g = amp_notebook.compile(rnn, hidden=32)" in text
    again = run_written(text, tmp_path)
    assert structure(again) == structure(graph)


def test_compiled_form_carries_the_constants_the_model_reads_and_changed_attributes(tmp_path: Path) -> None:
    graph = amp.compile(as_python.ggsnn, feature_width=6, edge_types=2, hidden=4, steps=2, classes=3)
    graph.nodes["gru_x"].worker = 1
    graph.nodes["init"].min_update_frequency = 5
    text = python_form(graph)
    assert "g.nodes['gru_x'].worker = 1" in text and "g.nodes['init'].min_update_frequency = 5" in text
    again = run_written(text, tmp_path)
    assert structure(again) == structure(graph)
    assert again.nodes["gru_x"].worker == 1 and again.nodes["init"].min_update_frequency == 5


def test_tree_recursion_is_written_back_too(tmp_path: Path) -> None:
    graph = amp.compile(as_python.tree_lstm, vocab_size=30, hidden=4, embedding_dim=3)
    text = python_form(graph)
    assert "def node(t):" in text and "node(t.left)" in text
    assert structure(run_written(text, tmp_path)) == structure(graph)


def test_edited_or_hand_built_graphs_are_written_as_builder_calls() -> None:
    graph = amp.compile(as_python.mlp, hidden=8)
    graph.remove_node("relu3")
    text = python_form(graph)
    assert text.startswith("# this graph was edited since amp.compile(mlp) made it: written as builder calls")
    assert "g.linear(" in text
    text = python_form(models.mlp(hidden=8))
    assert text.startswith("# this graph was not made by amp.compile")


def test_graph_builder_opens_a_compiled_graph_and_writes_its_source() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui import GraphBuilder

    graph = amp.compile(as_python.tree_lstm, vocab_size=30, hidden=4, embedding_dim=3)
    builder = GraphBuilder(graph)
    assert builder.problems() == []
    view = builder.model.view()
    assert {n["id"] for n in view["nodes"]} >= {"embed", "leaf_gates", "branch_gates", "classify"}
    assert builder.to_python(form="source") == python_form(graph)
    assert builder.to_python().startswith("from amp_notebook.ir import ops as O")  # the default stays builder code

    other = GraphBuilder()
    other.load(amp.compile(as_python.rnn, hidden=8))
    assert "def rnn(" in other.to_python(form="source")
    other.pin("step", 1)  # an attribute: still the compiled form, plus the assignment
    assert "g.nodes['step'].worker = 1" in other.to_python(form="source")
    other.delete("out")  # a structural edit: builder calls from now on
    assert other.to_python(form="source").startswith("# this graph was edited since")
    with pytest.raises(ValueError, match="form"):
        other.to_python(form="javascript")
