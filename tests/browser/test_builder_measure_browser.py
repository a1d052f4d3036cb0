"""The builder's canvas keeps every node drawn through edits. React Flow shows a node, and the edges at its
handles, only once it has measured the node's box, which its ResizeObserver reports; on a busy machine a
report can be spent on node objects that a newer view is already replacing (two views in quick succession),
and React Flow then waits for a report that never comes. Seen in full CI runs of
test_builder_lanes_browser.py: after an unpin the whole graph stayed hidden.

Here the page's ResizeObserver stops reporting React Flow's nodes once the graph is drawn, the worst case
of a lost report: edits that keep every node's ports (pin, unpin, undo) and a layout in the other direction,
which moves every handle, must still show every node and every edge."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook
from tests.browser.test_builder_lanes_browser import SETUP

pytestmark = pytest.mark.browser

ROOT = ".amp-builder"
NODES = 10  # models.mlp in SETUP
EDGES = 9
SHOWN_MS = 10_000  # a node measured at all is measured within a frame or two

# Once window.ampDropNodeReports is set, the page's ResizeObservers report nothing about React Flow nodes.
DROP_NODE_REPORTS = """
(() => {
  const Native = window.ResizeObserver;
  window.ResizeObserver = class extends Native {
    constructor(callback) {
      super((entries, observer) => {
        const kept = window.ampDropNodeReports
          ? entries.filter((e) => !e.target.classList.contains("react-flow__node"))
          : entries;
        if (kept.length) callback(kept, observer);
      });
    }
  };
})();
"""

# the counts of nodes shown (not hidden while unmeasured) and of edges drawn, as "nodes/edges"
DRAWN = f"""() => {{
  const nodes = [...document.querySelectorAll("{ROOT} .react-flow__node")];
  const shown = nodes.filter((n) => getComputedStyle(n).visibility !== "hidden" && n.offsetWidth > 0);
  return `${{shown.length}}/${{document.querySelectorAll("{ROOT} .react-flow__edge").length}}`;
}}"""


def _all_drawn(page: Any, after: str) -> None:
    want = f"{NODES}/{EDGES}"
    try:
        page.wait_for_function(f"() => ({DRAWN})() === '{want}'", timeout=SHOWN_MS)
    except Exception:  # Playwright's TimeoutError: say what is drawn instead
        drawn = page.evaluate(DRAWN)
        raise AssertionError(f"after {after}: nodes shown/edges drawn {drawn}, expected {want}") from None


def test_nodes_stay_drawn_when_resize_reports_are_lost(lab: Any, page: Any) -> None:
    page.add_init_script(DROP_NODE_REPORTS)
    nb = write_notebook(lab.root / "builder_measure.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    page.wait_for_selector(f"{ROOT}[data-nodes='{NODES}']", timeout=WAIT_MS)
    _all_drawn(page, "the first view")
    page.evaluate("() => { window.ampDropNodeReports = true; }")

    page.select_option(f"{ROOT} select[data-action='colour-by']", "worker")
    page.wait_for_selector(f"{ROOT} .amp-lane[data-worker='2']", timeout=WAIT_MS)
    node = f"{ROOT} .amp-node[data-node='linear1']"
    target = "1" if page.locator(node).get_attribute("data-worker") != "1" else "2"
    chip = page.locator(f"{ROOT} .amp-lane-chip[data-node='linear1']")
    chip.drag_to(page.locator(f"{ROOT} .amp-lane[data-worker='{target}']"))
    page.wait_for_selector(f"{node}[data-worker='{target}'][data-pinned='1']", state="attached", timeout=WAIT_MS)
    _all_drawn(page, "a pin")

    chip.drag_to(page.locator(f"{ROOT} .amp-lane-auto"))
    page.wait_for_selector(f"{node}[data-pinned='0']", state="attached", timeout=WAIT_MS)
    _all_drawn(page, "an unpin")

    page.locator(f"{ROOT} button[data-action='undo']").click()
    page.wait_for_selector(f"{node}[data-pinned='1']", state="attached", timeout=WAIT_MS)
    _all_drawn(page, "an undo")

    # the other direction: every node's handles move, so React Flow must measure every node anew
    direction = page.get_attribute(ROOT, "data-direction")
    other = "LR" if direction == "TB" else "TB"
    page.select_option(f"{ROOT} select[data-action='direction']", other)
    page.wait_for_selector(f"{ROOT}[data-direction='{other}']", state="attached", timeout=WAIT_MS)
    _all_drawn(page, f"a layout {other}")
    assert not page.errors, page.errors  # type: ignore[attr-defined]
