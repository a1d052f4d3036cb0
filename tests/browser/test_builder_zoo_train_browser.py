"""Train on a zoo model, from the builder's toolbar alone, in a real browser (JupyterLab + Chromium).

An empty builder with no training data: the model menu lists the zoo's models by the names the command
line and Python use (the tagger included); loading one from it and pressing Train starts a run on that
model's own small dataset with its recommended settings (a notice says which), the dashboard beside the
builder draws boxes, and the status line reads a finite training loss once the run has finished (the
zoo's settings do not diverge). The inspector's fields carry their one-line doc as a tooltip.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from amp_notebook.models import zoo
from amp_notebook.ui.builder_schema import fields
from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook.ui import GraphBuilder
b = GraphBuilder()
b
"""

CHANCE_LOSS = math.log(10)  # list reduction has 10 classes: a model that learned nothing sits here


def test_load_a_zoo_model_from_the_toolbar_and_train_it(lab: Any, page: Any) -> None:
    page.set_viewport_size({"width": 1700, "height": 1100})  # room for the dashboard beside the builder
    nb = write_notebook(lab.root / "builder_zoo_train.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    builder = page.locator(".amp-builder")
    builder.wait_for(timeout=WAIT_MS)

    # the zoo's names, as the CLI and Python spell them, each with its description as a tooltip
    menu = builder.locator('select[data-action="model"]')
    options = menu.locator("option")
    assert options.all_text_contents() == list(zoo.NAMES)
    assert "bilstm-tagger" in options.all_text_contents()
    assert options.nth(0).get_attribute("title") == zoo.ENTRIES[0].description

    # nothing loaded from the zoo and no data: Train says what is missing
    builder.locator('button[data-action="train"]').click()
    page.wait_for_selector(".amp-builder .amp-notice-error", timeout=WAIT_MS)
    assert "no training data" in builder.locator(".amp-notice").text_content()

    menu.select_option("rnn")
    builder.locator('button[data-action="load"]').click()
    page.wait_for_selector('.amp-builder[data-graph="rnn"]', timeout=WAIT_MS)
    train = builder.locator('button[data-action="train"]')
    assert train.get_attribute("data-zoo-model") == "rnn"
    assert "small dataset" in (train.get_attribute("title") or "")

    # the inspector's tooltips: each field's one-line doc from the op's declaration
    page.wait_for_function(
        "() => { const b = document.querySelector('.amp-builder');"
        " return b.querySelectorAll('.react-flow__node').length === Number(b.dataset.nodes); }",
        timeout=WAIT_MS,
    )
    builder.locator('.react-flow__node[data-id="step"] .amp-node-head').click()
    inspector = builder.locator('.amp-inspector[data-node="step"]')
    inspector.wait_for(timeout=WAIT_MS)
    for field in fields("linear"):
        label = inspector.locator(f'label.amp-field:has([data-field="{field["name"]}"])')
        assert (label.get_attribute("title") or "").startswith(field["doc"]), (field, label.get_attribute("title"))

    train.click()
    notice = builder.locator(".amp-notice-info")
    notice.wait_for(timeout=WAIT_MS)
    assert notice.text_content().startswith("training the zoo's rnn on its small dataset (list_reduction")
    page.wait_for_function(
        "() => { const d = document.querySelector('.amp-dashboard');"
        " return d && Number(d.getAttribute('data-boxes')) > 0; }",
        timeout=WAIT_MS,
    )
    page.wait_for_selector(".amp-dashboard[data-state='finished']", timeout=3 * WAIT_MS)
    page.wait_for_function(
        "() => /run finished: .*recent train loss/.test(document.querySelector('.amp-builder [data-status]')"
        ".textContent)",
        timeout=WAIT_MS,
    )
    status = builder.locator("[data-status]").text_content()
    epochs = zoo.get("rnn").settings.epochs
    assert f"epoch {epochs}/{epochs}" in status, status  # the zoo's epochs, not train's default of 1
    loss = float(re.search(r"recent train loss ([0-9.]+)", status).group(1))
    assert loss < CHANCE_LOSS, status
    assert not page.errors, page.errors
