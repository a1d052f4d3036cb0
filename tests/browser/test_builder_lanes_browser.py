"""Placement in the graph builder: in the "colour by worker" view each worker has a lane showing its nodes
and cost; a node dragged from the canvas onto a lane is pinned to that worker (and goes back to where it
was on the canvas); a node's chip dragged from a lane onto "heuristic" is unpinned. Python owns the result:
the test reads it back from the canvas, which draws Python's view."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, fit_view, open_and_run, write_notebook

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.ui import GraphBuilder
b = GraphBuilder(models.mlp(input_width=64, hidden=32), workers=3)
b
"""


def test_drag_a_node_onto_a_worker_lane(lab: Any, page: Any, tmp_path: Any) -> None:
    nb = write_notebook(lab.root / "builder_lanes.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    root = ".amp-builder"
    page.wait_for_selector(f"{root}[data-nodes='10']", timeout=WAIT_MS)
    page.select_option(f"{root} select[data-action='colour-by']", "worker")
    page.wait_for_selector(f"{root} .amp-lane[data-worker='2']", timeout=WAIT_MS)
    lanes = page.locator(f"{root} .amp-lane[data-cost]")
    assert lanes.count() == 3
    total_nodes = sum(int(lanes.nth(i).get_attribute("data-nodes") or 0) for i in range(3))
    assert total_nodes == 10

    node = page.locator(f"{root} .amp-node[data-node='linear1']")
    fit_view(page, root)  # the boxes below are read after the fit is drawn
    node.wait_for(timeout=WAIT_MS)
    before_worker = node.get_attribute("data-worker")
    target = "1" if before_worker != "1" else "2"
    box_before = page.locator(f"{root} .react-flow__node[data-id='linear1']").bounding_box()
    head = node.locator(".amp-node-head").bounding_box()
    lane = page.locator(f"{root} .amp-lane[data-worker='{target}']").bounding_box()
    assert head and lane and box_before
    page.mouse.move(head["x"] + 20, head["y"] + head["height"] / 2)
    page.mouse.down()
    steps = 12
    for i in range(1, steps + 1):  # in steps, so the canvas sees a drag and the lane under the pointer
        x = head["x"] + 20 + (lane["x"] + lane["width"] / 2 - head["x"] - 20) * i / steps
        y = (
            head["y"]
            + head["height"] / 2
            + (lane["y"] + lane["height"] / 2 - head["y"] - head["height"] / 2) * i / steps
        )
        page.mouse.move(x, y)
    page.wait_for_selector(f"{root} .amp-lane-hover[data-worker='{target}']", timeout=5_000)
    page.screenshot(path=str(tmp_path / "builder_lane_drag.png"))
    page.mouse.up()
    page.wait_for_selector(
        f"{root} .amp-node[data-node='linear1'][data-worker='{target}'][data-pinned='1']", timeout=WAIT_MS
    )
    page.wait_for_selector(
        f"{root} .amp-lane[data-worker='{target}'] .amp-lane-chip[data-node='linear1']", timeout=WAIT_MS
    )
    box_after = page.locator(f"{root} .react-flow__node[data-id='linear1']").bounding_box()
    assert box_after and abs(box_after["x"] - box_before["x"]) < 2 and abs(box_after["y"] - box_before["y"]) < 2
    page.screenshot(path=str(tmp_path / "builder_lanes.png"))

    # a chip dragged from its lane onto "heuristic" unpins the node
    chip = page.locator(f"{root} .amp-lane[data-worker='{target}'] .amp-lane-chip[data-node='linear1']")
    chip.drag_to(page.locator(f"{root} .amp-lane-auto"))
    unpinned = f"{root} .amp-node[data-node='linear1'][data-pinned='0']"
    page.wait_for_selector(unpinned, state="attached", timeout=WAIT_MS)
    # In some full CI runs the unpinned node stayed hidden (Playwright: not visible) though its state was
    # right: React Flow had spent a measurement of the boxes on node objects being replaced (two views in quick
    # succession on a busy CPU) and hid the whole graph at the next view. useGraphView.js keeps the nodes
    # measured; test_builder_measure_browser.py withholds the measurements to check it. The state is checked
    # first, so a failure says which of the two went wrong.
    fit_view(page, root)
    page.wait_for_selector(unpinned, timeout=WAIT_MS)

    # undo (Python's history) pins it again
    page.locator(f"{root} button[data-action='undo']").click()
    page.wait_for_selector(
        f"{root} .amp-node[data-node='linear1'][data-worker='{target}'][data-pinned='1']", timeout=WAIT_MS
    )
    assert not page.errors, page.errors  # type: ignore[attr-defined]
