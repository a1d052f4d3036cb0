"""Each tutorial is a pair: the notebook that nbval executes and its jupytext ``.py`` twin that diffs read.

The pair must say the same thing: every notebook has a twin, every twin a notebook, and their cells
(kind and source) are identical. After editing one side, run ``jupytext --sync tutorials/NAME.ipynb``.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))


def test_every_notebook_has_a_twin_and_every_twin_a_notebook() -> None:
    notebooks = {p.stem for p in NOTEBOOKS}
    twins = {p.stem for p in TUTORIALS.glob("*.py")}
    assert notebooks, f"no notebooks found in {TUTORIALS}"
    assert notebooks == twins, f"without a twin: {sorted(notebooks ^ twins)}"


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(path).cells]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_and_twin_hold_the_same_cells(notebook: Path) -> None:
    ipynb, py = _cells(notebook), _cells(notebook.with_suffix(".py"))
    assert len(ipynb) == len(py), f"{notebook.name}: {len(ipynb)} cells, its twin {len(py)}; run jupytext --sync"
    for i, (a, b) in enumerate(zip(ipynb, py, strict=True)):
        assert a == b, f"{notebook.name} cell {i} differs from its .py twin; run jupytext --sync {notebook}"
