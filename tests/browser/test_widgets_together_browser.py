"""The builder and a dashboard side by side in JupyterLab (what the builder's Train opens), checked in
Chromium: neither covers the other, and the builder's canvas re-fits when the dashboard takes half its row.

Checks, by bounding boxes and by what the page shows at points (``elementFromPoint``): the builder's box
and the dashboard's box do not overlap; every chart of the dashboard shows at its centre (no panel of the
builder over it; the builder's stylesheet once styled the dashboard's *Export trace* button as its own
export dialog, a white box over the charts); the dashboard's toolbar keeps its own look; every node of the
graph lies inside the builder's canvas after it narrowed (it once stayed at the old viewport, showing the
clipped edges of a few nodes). A screenshot of the pair is written to ``docs/images/``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook
from tests.browser.screenshots import save_screenshot

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.ui import GraphBuilder
b = GraphBuilder(models.mlp(input_width=64, hidden=32))
b.train_data = load_digits_dataset(batch_size=20, seed=0)
b.train_options = {"epochs": 1000, "max_active_keys": 2, "validate": False, "optimizer": {"name": "sgd", "lr": 0.05}}
b
"""

# the box of an element, and whether the element at each chart's centre belongs to that chart
GEOMETRY = """() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const builder = document.querySelector('.amp-builder');
  const dash = document.querySelector('.amp-dashboard');
  const canvas = builder.querySelector('.amp-canvas');
  const charts = [...dash.querySelectorAll('canvas')].map((c) => {
    c.scrollIntoView({block: 'center'});
    const r = c.getBoundingClientRect();
    const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
    return {cls: c.className, shown: top === c, top: top ? top.className : null};
  });
  builder.scrollIntoView({block: 'center'});
  const nodes = [...builder.querySelectorAll('.react-flow__node')].map((n) => ({id: n.dataset.id, ...box(n)}));
  const button = dash.querySelector('.amp-export');
  const style = getComputedStyle(button);
  return {builder: box(builder), dash: box(dash), canvas: box(canvas), nodes, charts,
          exportButton: {position: style.position, ...box(button)}};
}"""


def overlap(a: dict[str, float], b: dict[str, float]) -> float:
    """The area two boxes share (0 when they do not overlap)."""
    w = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
    return max(0.0, w) * max(0.0, h)


def test_builder_and_dashboard_side_by_side(lab: Any, page: Any, tmp_path: Any) -> None:
    page.set_viewport_size({"width": 1700, "height": 1100})  # room for both in one row, as on a wide screen
    nb = write_notebook(lab.root / "together.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    builder = page.locator('.amp-builder[data-graph="mlp"]')
    builder.wait_for(timeout=WAIT_MS)
    page.wait_for_selector(".amp-builder[data-fit-width]", timeout=WAIT_MS)
    alone = float(builder.get_attribute("data-fit-width") or 0)

    builder.locator('button[data-action="train"]').click()
    page.wait_for_function(
        "() => { const d = document.querySelector('.amp-dashboard');"
        " return d && Number(d.getAttribute('data-boxes')) > 0; }",
        timeout=WAIT_MS,
    )
    # the canvas narrowed when the dashboard opened beside it: it was fitted again at its new width
    page.wait_for_function(
        "() => { const b = document.querySelector('.amp-builder'); const c = b.querySelector('.amp-canvas');"
        " return Math.abs(Number(b.dataset.fitWidth) - c.clientWidth) <= 1; }",
        timeout=WAIT_MS,
    )
    narrowed = float(builder.get_attribute("data-fit-width") or 0)
    assert narrowed < alone - 100, (alone, narrowed)
    page.wait_for_timeout(500)  # a frame or two for React Flow to apply the viewport
    g = page.evaluate(GEOMETRY)

    assert g["builder"]["w"] > 300 and g["dash"]["w"] > 300, g
    assert overlap(g["builder"], g["dash"]) == 0, (g["builder"], g["dash"])
    # every chart of the dashboard is what shows at its centre: nothing of the builder's lies over it
    hidden = [c for c in g["charts"] if not c["shown"]]
    assert not hidden, hidden
    # the dashboard's Export trace button is a button in its toolbar, not the builder's export dialog
    assert g["exportButton"]["position"] != "absolute", g["exportButton"]
    assert g["exportButton"]["w"] < 200 and g["exportButton"]["h"] < 60, g["exportButton"]
    # every node of the graph lies inside the canvas that narrowed
    c = g["canvas"]
    outside = [n for n in g["nodes"] if n["x"] < c["x"] - 1 or n["x"] + n["w"] > c["x"] + c["w"] + 1
               or n["y"] < c["y"] - 1 or n["y"] + n["h"] > c["y"] + c["h"] + 1]  # fmt: skip
    assert len(g["nodes"]) == int(builder.get_attribute("data-nodes") or 0), g["nodes"]
    assert not outside, (c, outside)

    row = page.locator(".jp-OutputArea-output:has(.amp-builder)").first
    shot = save_screenshot(row, "builder_and_dashboard.png")
    print(f"builder and dashboard side by side: {shot}")
    page.click(".amp-dashboard .amp-stop")
    page.wait_for_selector(".amp-dashboard[data-state='finished']", timeout=WAIT_MS)
    assert not page.errors, page.errors
