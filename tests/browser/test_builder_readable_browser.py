"""Readable on first sight: zoo graphs loaded into the builder (``GraphBuilder(); b.load_model(name)``) open at
a zoom where node labels are at least 10 px on screen, with every node inside a canvas whose height fits
the graph, laid out top to bottom for long chains, with loop back-edges drawn as their own routed edges.
A graph too long to fit at that size (the GGSNN: 18 layers) opens at the readable zoom showing its start,
in a canvas of the largest height, with the minimap for the rest.

The sizes are measured on screen (font size times the scale the page actually applied to the text), per
model, written to ``label_sizes.json`` beside one screenshot per model in the test's tmp dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook

pytestmark = pytest.mark.browser

# zoo name: graph name
MODELS = {"rnn": "rnn", "mlp": "mlp", "tree-lstm": "tree_lstm", "ggsnn-classification": "ggsnn_classification"}
TOO_LONG = {"ggsnn-classification"}
READABLE_PX = 10.0
CANVAS_MAX_H = 780  # widgets/src/builder/fit.js

CELL = """
from amp_notebook.ui import GraphBuilder
b_{graph} = GraphBuilder()
b_{graph}.load_model("{name}")
b_{graph}
"""

# On-screen sizes of what a builder draws: font size times the scale its element is drawn at (the
# viewport's zoom and anything else the page applies), the canvas and the nodes' boxes.
MEASURE = """(root) => {
  const onScreen = (el) =>
    parseFloat(getComputedStyle(el).fontSize) * el.getBoundingClientRect().height / el.offsetHeight;
  const sizes = (sel) => [...root.querySelectorAll(sel)].filter((el) => el.offsetHeight > 0).map(onScreen);
  const canvas = root.querySelector('.amp-canvas').getBoundingClientRect();
  const nodes = [...root.querySelectorAll('.react-flow__node')].map((n) => n.getBoundingClientRect());
  const vp = new DOMMatrix(getComputedStyle(root.querySelector('.react-flow__viewport')).transform);
  return {
    zoom: vp.a,
    labels: sizes('.react-flow__node .amp-node-kind, .react-flow__node .amp-node-name'),
    ports: sizes('.react-flow__node .amp-port-name'),
    canvas: {x: canvas.x, y: canvas.y, width: canvas.width, height: canvas.height},
    nodes: nodes.map((r) => ({x: r.x, y: r.y, right: r.right, bottom: r.bottom})),
    loops: root.querySelectorAll('.react-flow__edge.amp-loop-edge').length,
    direction: root.dataset.direction || null,
    fits: root.dataset.fits || null,
    minimap: root.querySelectorAll('.react-flow__minimap').length,
    first: (() => { const r = root.querySelector('.react-flow__node').getBoundingClientRect();
                    return {x: r.x, y: r.y, right: r.right, bottom: r.bottom}; })(),
  };
}"""


def test_zoo_graphs_open_readable(lab: Any, page: Any, tmp_path: Path) -> None:
    nb = write_notebook(lab.root / "builder_readable.ipynb", [CELL.format(name=m, graph=g) for m, g in MODELS.items()])
    open_and_run(page, lab, nb)
    report: dict[str, Any] = {}
    for name, graph in MODELS.items():
        root = page.locator(f'.amp-builder[data-graph="{graph}"]')
        root.wait_for(timeout=WAIT_MS)
        root.scroll_into_view_if_needed()
        page.wait_for_selector(f'.amp-builder[data-graph="{graph}"][data-render-ms]', timeout=WAIT_MS)
        page.wait_for_timeout(300)  # the initial viewport is set in the frame after the nodes were measured
        m = root.evaluate(MEASURE)
        root.screenshot(path=str(tmp_path / f"builder_{name}.png"))
        c = m["canvas"]

        def shown(n: dict[str, float], c: dict[str, float] = c) -> bool:
            return (n["x"] >= c["x"] - 1 and n["right"] <= c["x"] + c["width"] + 1
                    and n["y"] >= c["y"] - 1 and n["bottom"] <= c["y"] + c["height"] + 1)  # fmt: skip

        inside = all(shown(n) for n in m["nodes"])
        graph_h = max(n["bottom"] for n in m["nodes"]) - min(n["y"] for n in m["nodes"])
        report[name] = {
            "zoom": round(m["zoom"], 3),
            "label_px_min": round(min(m["labels"]), 2),
            "port_px_min": round(min(m["ports"]), 2) if m["ports"] else None,
            "canvas_px": [round(c["width"]), round(c["height"])],
            "graph_height_px": round(graph_h),
            "all_nodes_inside": inside,
            "first_node_shown": shown(m["first"]),
            "fits": m["fits"],
            "minimap": m["minimap"],
            "loop_edges": m["loops"],
            "direction": m["direction"],
        }
    (tmp_path / "label_sizes.json").write_text(json.dumps(report, indent=1))
    print(f"\ninitial label sizes: {json.dumps(report, indent=1)}\n(screenshots in {tmp_path})")
    for name, r in report.items():
        assert r["label_px_min"] >= READABLE_PX, (name, r)
        assert r["direction"] == "TB", (name, r)  # all four are longer than they are wide
        if name in TOO_LONG:  # readable, starting at the inputs, the canvas as tall as it gets, a minimap
            assert r["fits"] == "0" and r["first_node_shown"] and r["minimap"] == 1, (name, r)
            assert r["canvas_px"][1] == CANVAS_MAX_H, (name, r)
            continue
        assert r["fits"] == "1" and r["all_nodes_inside"] and r["minimap"] == 0, (name, r)
        # the canvas fits the graph: no more than a band of padding around it (or the minimum height)
        assert r["canvas_px"][1] <= max(420, r["graph_height_px"] + 60), (name, r)
    assert report["rnn"]["loop_edges"] == 1 and report["tree-lstm"]["loop_edges"] == 1, report
    assert not page.errors, page.errors  # type: ignore[attr-defined]
