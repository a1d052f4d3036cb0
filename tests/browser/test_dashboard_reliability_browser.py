"""The dashboard's reliability parts in a real browser (JupyterLab + Chromium): the *Save checkpoint* button
saves the live run, which goes on; a run stopped by the watchdog shows its diagnosis; a run that skips keys
for NaN/inf shows how many."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import open_and_run, write_notebook
from tests.browser.test_dashboard_browser import attr, wait_attr

pytestmark = pytest.mark.browser

LIVE = """
from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.train import train
from amp_notebook.ui.dashboard import Dashboard
ds = load_digits_dataset(batch_size=20, seed=0)
run = train(models.mlp(input_width=64, hidden=32), ds, background=True, workers=2, mode="amp",
            max_active_keys=2, epochs=100_000, seed=0, validate=False)
Dashboard(run, rate_hz=8, checkpoint_path="saved_from_the_button.npz")
"""

STUCK = """
from amp_notebook.testing import faults, runs
runs.WATCHDOG_S = 0.5
stuck, _ = faults.start(faults.Setup("mlp", "amp"),
                        faults.installer(faults.Fault("drop", k=3, node="linear2", phase="bwd")))
Dashboard(stuck, rate_hz=8)
"""

SKIPPING = """
import numpy as np
from amp_notebook.data import Batch, Dataset
first = ds.train[0]
x = first.inputs["x"].copy()
x[0, 0] = np.nan
nan_data = Dataset(ds.name, [Batch({**first.inputs, "x": x}, first.size), *ds.train[1:]], [])
skipping = train(models.mlp(input_width=64, hidden=16), nan_data, background=True, epochs=3, on_nonfinite="skip")
Dashboard(skipping, rate_hz=8)
"""


def test_checkpoint_button_diagnosis_and_skip_count(lab: Any, page: Any, tmp_path: Path) -> None:
    nb = write_notebook(lab.root / "dashboard_reliability.ipynb", [LIVE, STUCK, SKIPPING])
    open_and_run(page, lab, nb)
    dashboards = page.locator(".amp-dashboard[data-mode='live']")
    dashboards.nth(2).wait_for(timeout=90_000)
    live, stuck, skipping = (f".jp-Cell:nth-child({i}) .amp-dashboard" for i in (1, 2, 3))

    wait_attr(page, live, "el.dataset.state === 'running'")
    page.click(f"{live} .amp-checkpoint")
    wait_attr(page, live, "!!el.dataset.checkpoint")
    saved = Path(attr(page, live, "data-checkpoint") or "")
    assert saved.name == "saved_from_the_button.npz" and saved.stat().st_size > 0
    assert "checkpoint saved to" in page.locator(f"{live} .amp-note").inner_text()
    wait_attr(page, live, "el.dataset.state === 'running'")  # the run went on

    wait_attr(page, stuck, "el.dataset.state === 'failed' && !!el.dataset.diagnosis")
    assert "a message was lost" in (attr(page, stuck, "data-diagnosis") or "")
    text = page.locator(f"{stuck} .amp-diagnosis").inner_text()
    assert "Keys in flight:" in text and "Linear 'linear2'" in text and "waits for its backward message" in text

    wait_attr(page, skipping, "el.dataset.state === 'finished' && el.dataset.skipped === '3'")
    assert "skipped 3 keys (NaN/inf)" in page.locator(f"{skipping} .amp-stats").inner_text()
    page.screenshot(path=str(tmp_path / "dashboard_checkpoint.png"), full_page=True)
    for name, selector in (("stuck", stuck), ("skipping", skipping)):
        page.locator(selector).scroll_into_view_if_needed()
        page.locator(selector).screenshot(path=str(tmp_path / f"dashboard_{name}.png"))
    page.click(f"{live} .amp-stop")
    wait_attr(page, live, "el.dataset.state === 'finished'")
    assert not page.errors, page.errors  # type: ignore[attr-defined]
