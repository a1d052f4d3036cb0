"""Programs the compiler refuses, each with an error that names the offending line and says what to write;
and the proof that compiling runs nothing from the model's module."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import pytest

import amp_notebook as amp
from amp_notebook.models import as_python
from tests.compiler import refused_programs as programs

# program name -> a phrase its error must contain (the why or the what-instead)
HINTS = {
    "payload_if": "branches on a tensor value",
    "payload_comparison": "compares a tensor",
    "payload_while": "branches on a tensor value",
    "payload_conditional_expression": "branches on a tensor value",
    "iterate_a_tensor": "nn.Sequence",
    "try_except": "try/except is not compiled",
    "with_block": "'with' blocks are not compiled",
    "generator": "generator",
    "mutable_global": "mutable global",
    "closure_over_a_list": "mutable global or closure",
    "print_call": "side effects",
    "append_to_a_global": "mutable global",
    "calls_an_outside_function": "does not run or inline outside functions",
    "reads_an_object": "only constants",
    "object_as_default": "compile-time constants",
    "lambda_expression": "nested def",
    "list_comprehension": "write a for loop",
    "break_statement": "while",
    "del_statement": "del is not compiled",
    "import_inside": "import at module level",
    "tensor_division": "no IR op",
    "returns_a_tensor": "a graph's outputs are its losses",
    "recursion_over_a_number": "recursion is compiled only over a tree",
    "raise_statement": "raise is not compiled",
    "global_statement": "'global' is not compiled",
    "non_invertible_counter": "invertible",
    "element_after_the_loop": "not defined after it",
    "set_in_one_branch": "only one branch",
    "shared_name_different_shapes": "same op and shape",
    "tensor_subscript": "indexed only by the counter",
    "numpy_call": "module from outside",
    "method_on_a_tensor": "method calls on tensors",
    "label_at_the_leaves": "every node passes",
    "outer_tensor_in_recursion": "from outside the recursion",
    "untyped_input": "no type and no default",
    "eval_call": "builtin eval()",
    "no_loss": "makes no loss",
    "width_changes_in_the_loop": "keeps its width",
    "ids_into_a_linear": "embed ids first",
    "while_without_a_counter": "reads no counter",
    "zeros_inside_a_loop": "make them before the loop",
}


def marked_line(fn: types.FunctionType) -> int:
    lines, start = inspect.getsourcelines(fn)
    (index,) = [i for i, text in enumerate(lines) if "# refused" in text]
    return start + index


def test_every_refused_program_is_listed() -> None:
    found = {
        name
        for name, fn in vars(programs).items()
        if isinstance(fn, types.FunctionType)
        and "# refused" in inspect.getsource(fn)
        and name != "make_closure_over_a_list"
    }
    assert found == set(HINTS)
    assert len(HINTS) >= 20


@pytest.mark.parametrize("name", sorted(HINTS))
def test_refused_program_names_its_line_and_says_what_to_do(name: str) -> None:
    fn = getattr(programs, name)
    with pytest.raises(amp.CompileError) as caught:
        amp.compile(fn)
    error = caught.value
    assert error.line == marked_line(fn), f"{name}: the error names line {error.line}: {error}"
    assert error.function == fn.__name__
    assert f"line {error.line}" in str(error)
    assert HINTS[name] in error.message, f"{name}: {error.message}"
    assert error.text is not None and "# refused" in error.text  # the offending source line is quoted
    assert programs.EFFECTS == [], f"compiling {name} ran code of the model's module: {programs.EFFECTS}"


def test_amp_nn_functions_do_not_compute_outside_compile() -> None:
    with pytest.raises(TypeError, match=r"amp\.compile"):
        amp.nn.linear(None, 3)


def test_compiling_runs_no_code_of_the_model_module() -> None:
    """Every Python-level call made while compiling is recorded: none is to code in the model's module (the
    model function, its nested helpers, the side-effect helpers) or in this test file."""
    watched = {inspect.getsourcefile(programs), inspect.getsourcefile(as_python), __file__}
    entered: list[str] = []

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in watched:
            entered.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")

    graphs = []
    sys.setprofile(profile)
    try:
        for model in (as_python.rnn, as_python.tree_lstm, as_python.ggsnn, as_python.mlp):
            graphs.append(amp.compile(model))
        for name in ("print_call", "calls_an_outside_function", "reads_an_object", "object_as_default"):
            with pytest.raises(amp.CompileError):
                amp.compile(getattr(programs, name))
        compiled = list(entered)
        programs.effect()  # the control: a call into the watched module is seen
    finally:
        sys.setprofile(None)
    assert compiled == [], f"compiling entered code of the model's modules: {compiled}"
    assert len(entered) == 1 and entered[0].startswith("effect ")
    assert programs.EFFECTS == ["effect() ran"]
    programs.EFFECTS.clear()
    assert all(g.nodes for g in graphs)


def test_errors_inside_helpers_and_loops_name_the_inner_line() -> None:
    def model(tokens: amp.nn.Sequence(int), target: amp.nn.Ints()):
        def cell(x, h):
            return nn_relu(amp.nn.linear(amp.nn.concat(x, h), 8, name="step"))  # noqa: F821 - the error

        h = amp.nn.zeros(8)
        for token in tokens:
            h = cell(amp.nn.embedding(token, 14, 4, name="embed"), h)
        return amp.nn.softmax_cross_entropy(amp.nn.linear(h, 3), target)

    _, start = inspect.getsourcelines(model)
    with pytest.raises(amp.CompileError, match="'nn_relu' is not defined") as caught:
        amp.compile(model)
    assert caught.value.line == start + 2


def test_a_compiled_graph_that_does_not_validate_is_reported_at_the_node_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The validator's problems (a compiler bug, if it ever happens) come back as a CompileError at the line of
    the node concerned; here a broken finalize drops the edge into the loss's target."""
    import amp_notebook.compiler as compiler

    real = compiler.finalize

    def broken(draft: Any) -> amp.Graph:
        graph = real(draft)
        graph.disconnect("loss", "target")
        return graph

    monkeypatch.setattr(compiler, "finalize", broken)
    with pytest.raises(amp.CompileError, match="does not validate") as caught:
        amp.compile(as_python.rnn)
    _, start = inspect.getsourcelines(as_python.rnn)
    assert "'target'" in caught.value.message  # the first problem: the input 'target' now feeds nothing
    assert caught.value.line == start  # the line of the def, where the input is declared
