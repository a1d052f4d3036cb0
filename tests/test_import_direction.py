"""Imports point one way: the IR and the compiler load no runtime, no UI, and neither threadpoolctl nor networkx.

``ir/`` and ``compiler/`` are data and translation; the runtime (threads, BLAS limits) and the widgets build on
them, never the reverse. The package's top level imports lazily (PEP 562), so ``import amp_notebook.ir`` runs
only the IR's own modules. A fresh interpreter is the judge (a test process has imported everything already);
the source is read too, so that a lazy import inside a function cannot hide the wrong direction.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import amp_notebook
from tests.runtime.test_imports import imports_in

PACKAGE = Path(amp_notebook.__file__).parent
FORBIDDEN = ("amp_notebook.runtime", "amp_notebook.ui", "threadpoolctl", "networkx")


def loaded_by(statement: str) -> list[str]:
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_importing_the_ir_and_the_compiler_loads_no_runtime_ui_threadpoolctl_or_networkx() -> None:
    modules = loaded_by("import amp_notebook.ir, amp_notebook.compiler")
    assert {"amp_notebook.ir.graph", "amp_notebook.ir.validate", "amp_notebook.compiler.translate"} <= set(modules)
    assert under(modules, FORBIDDEN) == []


def test_building_and_validating_a_graph_loads_no_runtime_or_ui() -> None:
    modules = loaded_by(
        "from amp_notebook.ir.graph import Graph\n"
        "g = Graph('mlp'); x = g.input('x', width=4)\n"
        "g.softmax_cross_entropy(g.linear(x, 3), g.input('target', dtype='int'))\n"
        "g.validate(require_loss=True); g.topological_order()"
    )
    assert "networkx" in modules  # the analyses ran, importing networkx when first needed
    assert under(modules, ("amp_notebook.runtime", "amp_notebook.ui", "threadpoolctl")) == []


@pytest.mark.parametrize("package", ["ir", "compiler"])
def test_no_ir_or_compiler_module_imports_the_runtime_or_the_ui_even_lazily(package: str) -> None:
    found = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for target, where in imports_in(path.read_text(encoding="utf-8")):
            if under([target], ("amp_notebook.runtime", "amp_notebook.ui")):
                found.append(f"{path.relative_to(PACKAGE)} ({where or 'module level'}) imports {target}")
    assert not found


def test_the_lazy_top_level_keeps_every_name_and_lists_it() -> None:
    import amp_notebook as amp

    listed = dir(amp)
    for name in ("train", "Graph", "models", "data", "trace", "RunConfig", "simulate", "AmpError"):
        assert name in listed and name in amp.__all__
    assert callable(amp.train) and amp.Graph.__name__ == "Graph" and hasattr(amp.models, "rnn")
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        _ = amp.trian
