"""Compound cells in the graph builder: a GGSNN with one Linear per edge type (53 IR nodes, its GRU cell of
3 tagged ``meta["cell"]``) opens with the cell collapsed into one box wired to the rest (graphs over 30 nodes
do); double-click expands it into its IR nodes, and double-clicking one of those collapses it again. The
graph itself never changes: only the view."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.ui import GraphBuilder
b = GraphBuilder(models.ggsnn(n_edge_types=4, feature_width=8, classes=4, fused_edges=False))
b
"""


def test_cells_collapse_and_expand(lab: Any, page: Any, tmp_path: Any) -> None:
    nb = write_notebook(lab.root / "builder_cells.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    root = ".amp-builder[data-collapsed-cells]"
    page.wait_for_selector(f'{root}[data-collapsed-cells="1"]', timeout=WAIT_MS)
    total = int(page.get_attribute(root, "data-nodes") or 0)
    cell = page.locator('.react-flow__node .amp-cell[data-cell="gru"]')
    cell.wait_for(timeout=WAIT_MS)
    members = int(cell.get_attribute("data-members") or 0)
    assert members == 3  # gru_x, gru_h, gru_update: h comes in as two copies from the graph's own fan-out
    assert int(page.get_attribute(root, "data-shown-nodes") or 0) == total - members + 1
    assert page.locator(".react-flow__node").count() == total - members + 1
    assert page.locator(".react-flow__edge").count() > 0  # the box is wired to the rest of the graph
    # the collapsed view was fitted to the canvas, and its render timed once every box was measured
    page.wait_for_selector(f"{root}[data-initial-zoom][data-render-ms]", timeout=WAIT_MS)
    page.screenshot(path=str(tmp_path / "builder_cell_collapsed.png"))

    # a small box in a fitted view sits under edge paths, so the double-click goes to the node element itself
    page.locator(".react-flow__node:has(.amp-cell)").dispatch_event("dblclick")
    page.wait_for_selector(f'{root}[data-collapsed-cells="0"]', timeout=WAIT_MS)
    assert page.locator(".react-flow__node").count() == total
    page.locator(".react-flow__node:has(.amp-node-cell)").first.dispatch_event("dblclick")
    page.wait_for_selector(f'{root}[data-collapsed-cells="1"]', timeout=WAIT_MS)
    assert int(page.get_attribute(root, "data-nodes") or 0) == total  # the graph did not change
    assert not page.errors, page.errors  # type: ignore[attr-defined]
