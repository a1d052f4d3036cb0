"""Write models as Python, get the IR: ``amp.compile`` turns a plain Python function into an AMP graph.

The paper leaves this as future work ("a compiler that automatically deduces the information to be placed
in the states ... from a higher-level description of the models"). A model is a function written against
the small vocabulary of :mod:`amp_notebook.compiler.nn` (``nn.linear``, ``nn.embedding``, ``nn.relu``,
``nn.concat``, the cells, the losses, ``+ - *`` between tensors)::

    @amp.compile
    def rnn(tokens: nn.Sequence(int), target: nn.Ints(), hidden=128):
        h = nn.zeros(hidden)
        for token in tokens:
            x = nn.concat(nn.embedding(token, 14, 64, name="embed"), h)
            h = nn.relu(nn.linear(x, hidden, name="step"))
        return nn.softmax_cross_entropy(nn.linear(h, 10, name="out"), target)

How it translates
-----------------
The compiler reads the function's *source* (``source.py``): nothing the model's module contains is run,
not the function, not its helpers, not the objects it names. It walks the AST once (``translate.py``),
keeping a compile-time value for every Python name: a constant, a payload stream (an output port of the
graph being built), or a *state value*, an integer that lives in the messages' state (a loop counter,
``len(seq)``, a declared ``nn.Field``, a tree position). The translation of each construct:

* straight-line ``amp.nn`` calls and ``+ - *``: one node per call site (``vocabulary.py``); a name read
  twice fans out through a Bcast;
* ``for x in seq`` over an ``nn.Sequence`` input, ``for i in range(a, b)``, ``enumerate``/``zip`` of
  sequences and ``while`` on a counter (``loops.py``): the loop counter and its bound are deduced and put in
  the state. Every payload value the body reads or assigns goes round an Isu (enter: counter = start), a
  Phi, a Cond on the bound, the body, and an Isu (counter + step) back to the Phi; the exit removes the
  counter when its final value is known. Sequence elements come from an Ungroup before the loop;
* ``if`` on a state value (``branches.py``): every payload value either side touches passes a Cond, the
  sides merge in Phis; ``if`` on a constant keeps one side; ``if`` on a payload value is refused (the IR
  routes messages by their state, and payloads exist only when the graph runs);
* a nested ``def node(t)`` that calls itself on ``t.left`` and ``t.right`` of an ``nn.Tree`` input
  (``recursion.py``): a Flatmap of the leaves with their heap position ``pos`` in the state, a Collect
  that joins the two children of ``pos // 2`` into their parent, and a Cond on ``pos == 1`` for the root,
  as the zoo's Tree-LSTM is built by hand. Other nested ``def``\\ s are inlined where they are called;
* ``name=`` on ``nn.linear``/``nn.embedding``: one call site is one node, so it shares its weights across
  iterations and recursive calls; the same name at two call sites is one node behind a multiplexer
  (``draft.py``).

Then ``draft.py`` removes code no loss depends on, resolves fan-out (Bcast) and unread outputs (Discard,
or Sink where the producer waits for a gradient), and the graph is validated. Errors, the compiler's and
the validator's, name the user's source line and say what to write instead (:class:`CompileError`).

The graph records where it came from (``pyform.py``): ``GraphBuilder(graph).to_python(form="source")``
writes the function back as long as the graph keeps that structure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.draft import finalize
from amp_notebook.compiler.errors import CompileError
from amp_notebook.compiler.function import translate_model
from amp_notebook.compiler.pyform import CompiledFrom, python_form
from amp_notebook.compiler.source import Source
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.validate import ValidationError

__all__ = ["CompileError", "CompiledFrom", "compile", "compile_source", "nn", "python_form"]


def compile(fn: Callable[..., Any] | None = None, /, **constants: Any) -> Any:
    """The IR graph of a model function (see the module docstring); also a decorator.

    ``constants`` override the function's parameters that have defaults (``amp.compile(rnn, hidden=64)``);
    ``@amp.compile(hidden=64)`` does the same as a decorator. Raises :class:`CompileError` naming the source
    line for anything it cannot translate.
    """
    if fn is None:
        return lambda f: compile(f, **constants)
    return compile_source(Source.from_function(fn), constants)


def compile_source(source: Source, constants: dict[str, Any] | None = None) -> Graph:
    """Compile a model given as a :class:`Source` (a function's, or text such as ``amp.from_torch`` writes)."""
    constants = dict(constants or {})
    translator = translate_model(source, constants)
    graph = finalize(translator.g)
    try:
        graph.validate(require_loss=True)
    except ValidationError as exc:
        problem = exc.problems[0]
        node = graph.nodes.get(problem.node) if problem.node else None
        line = node.meta.get("line") if node is not None else None
        lines = source.text.splitlines()
        text = (
            lines[line - source.first_line] if line is not None and 0 <= line - source.first_line < len(lines) else None
        )
        raise CompileError(
            f"the compiled graph does not validate (please report this with the model): {problem.message}"
            + (f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""),
            line=line,
            text=text,
            function=source.name,
            filename=source.filename,
        ) from exc
    graph.compiled_from = CompiledFrom.record(source, constants, graph)
    return graph
