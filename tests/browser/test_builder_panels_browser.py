"""What the builder shows beside the graph follows the graph, in a real browser (JupyterLab + Chromium).

Checks: a value the inspector sends and Python refuses ("many" for ``min_update_frequency``) brings a
notice, and the field shows the value in effect again, not the refused text; the export dialog's code
follows an edit made while it is open; loading another model from the toolbar closes the notice, the export
dialog and the inspector of the graph before.

It also writes ``docs/images/builder.png``: the builder holding the zoo's RNN (the paper's Fig. 2), loaded
from its toolbar.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook
from tests.browser.screenshots import save_screenshot

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.ui import GraphBuilder
b = GraphBuilder(models.mlp(input_width=64, hidden=32))
b
"""

# an edit from Python while the export dialog is open: once the canvas asked for an export
RENAME = """
import threading, time
def rename_when_exported():
    while not b.export:
        time.sleep(0.05)
    b.set_property("linear4", "name", "readout")
threading.Thread(target=rename_when_exported, daemon=True).start()
"""


def test_refusals_exports_and_the_inspector_follow_the_graph(lab: Any, page: Any) -> None:
    nb = write_notebook(lab.root / "builder_panels.ipynb", [SETUP, RENAME])
    open_and_run(page, lab, nb)
    builder = page.locator('.amp-builder[data-graph="mlp"]')
    builder.wait_for(timeout=WAIT_MS)
    page.wait_for_selector(".amp-builder[data-fit-width]", timeout=WAIT_MS)

    # a refused value: a notice, and the field shows the value in effect (empty: the run's default)
    builder.locator('.react-flow__node[data-id="linear1"] .amp-node-head').click()
    inspector = builder.locator('.amp-inspector[data-node="linear1"]')
    inspector.wait_for(timeout=WAIT_MS)
    field = inspector.locator('input[data-field="min_update_frequency"]')
    field.fill("many")
    field.press("Enter")
    notice = builder.locator(".amp-notice")
    notice.wait_for(timeout=WAIT_MS)
    assert "many" in notice.text_content()
    page.wait_for_function(
        "() => document.querySelector('.amp-inspector input[data-field=\"min_update_frequency\"]').value === ''",
        timeout=WAIT_MS,
    )
    # a value taken shows as Python holds it
    field.fill("4")
    field.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('.amp-inspector input[data-field=\"min_update_frequency\"]').value === '4'",
        timeout=WAIT_MS,
    )

    # the export dialog shows the graph's code, and follows an edit made while it is open
    builder.locator('button[data-action="export-python"]').click()
    dialog = builder.locator(".amp-export textarea")
    dialog.wait_for(timeout=WAIT_MS)
    assert "linear1" in dialog.input_value()
    page.wait_for_function(
        "() => document.querySelector('.amp-export textarea').value.includes('readout')", timeout=WAIT_MS
    )

    # another model from the toolbar: notice, export and inspector of the last graph close
    field.fill("many")
    field.press("Enter")
    page.wait_for_selector('.amp-builder[data-graph="mlp"] .amp-notice', timeout=WAIT_MS)
    builder.locator('select[data-action="model"]').select_option("rnn")
    builder.locator('button[data-action="load"]').click()
    page.wait_for_selector('.amp-builder[data-graph="rnn"]', timeout=WAIT_MS)
    rnn = page.locator('.amp-builder[data-graph="rnn"]')
    page.wait_for_timeout(300)  # a frame for the overlays
    assert rnn.locator(".amp-notice").count() == 0
    assert rnn.locator(".amp-export").count() == 0
    assert rnn.locator(".amp-inspector").count() == 0

    # the picture of the builder, once every node of the loaded model is drawn and the canvas fitted to it
    page.wait_for_function(
        "() => { const b = document.querySelector('.amp-builder[data-graph=\"rnn\"]');"
        " return b.querySelectorAll('.react-flow__node').length === Number(b.dataset.nodes); }",
        timeout=WAIT_MS,
    )
    page.wait_for_timeout(500)
    page.mouse.move(0, 0)
    print(f"builder: {save_screenshot(rnn, 'builder.png')}")
    assert not page.errors, page.errors
