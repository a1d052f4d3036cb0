"""The dashboard's charts have axes: a live run in JupyterLab + Chromium, and for each chart under the Gantt
the ticks and units it drew (the canvases carry them as data attributes; a screenshot of the whole
dashboard goes to the test's tmp dir as ``dashboard_axes.png``).

Checks: the time-series charts (queue depth, keys in flight, loss and accuracy) share time ticks in one
unit (s, ms or µs), their value axes start at 0 with units (messages, keys, loss; accuracy in % on the
right), counts tick in whole numbers, and the staleness histograms tick staleness (updates) and gradients.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.train import train
from amp_notebook.ui.dashboard import Dashboard
ds = load_digits_dataset(batch_size=20, seed=0)
run = train(models.mlp(input_width=64, hidden=32), ds, background=True, workers=2, mode="amp",
            max_active_keys=2, epochs=100_000, seed=0, validate=False, optimizer={"name": "sgd", "lr": 0.05})
Dashboard(run, rate_hz=8)
"""

LIVE = '.amp-dashboard[data-mode="live"]'
TIME_LABEL = re.compile(r"^-?\d+(\.\d+)? (s|ms|µs)$")


def charts_drawn(page: Any) -> dict[str, dict[str, Any]]:
    """The ticks and units each chart drew, read in one go (the live view redraws 8 times a second)."""
    data = page.locator(LIVE).evaluate(
        "root => Object.fromEntries(['queue', 'keys', 'loss', 'hist'].map("
        "(name) => [name, {...root.querySelector('canvas.amp-' + name).dataset}]))"
    )
    return {name: {k: json.loads(v) if k.endswith("Ticks") else v for k, v in d.items()} for name, d in data.items()}


def test_dashboard_charts_have_axes_with_ticks_and_units(lab: Any, page: Any, tmp_path: Path) -> None:
    nb = write_notebook(lab.root / "dashboard_axes.ipynb", [SETUP])
    open_and_run(page, lab, nb)
    # enough of the run drawn: a loss sample, and the staleness of some gradients
    page.wait_for_function(
        f"""() => {{ const loss = document.querySelector('{LIVE} canvas.amp-loss');
                    const hist = document.querySelector('{LIVE} canvas.amp-hist');
                    return !!loss && !!hist && !!hist.dataset.xTicks && JSON.parse(hist.dataset.xTicks).length > 0
                      && Number(document.querySelector('{LIVE}').dataset.frames) > 8; }}""",
        timeout=WAIT_MS,
    )
    page.locator(LIVE).scroll_into_view_if_needed()
    page.locator(LIVE).screenshot(path=str(tmp_path / "dashboard_axes.png"))
    charts = charts_drawn(page)
    (tmp_path / "axes.json").write_text(json.dumps(charts, indent=1, ensure_ascii=False))
    print(f"\nchart axes: {json.dumps(charts, ensure_ascii=False)}\n(screenshot in {tmp_path})")

    units = {"queue": "messages", "keys": "keys", "loss": "loss"}
    x_ticks = None
    for name, unit in units.items():
        c = charts[name]
        assert c["yUnit"] == unit, (name, c)
        assert len(c["xTicks"]) >= 2 and all(TIME_LABEL.match(t) for t in c["xTicks"]), (name, c)
        assert len({t.split(" ")[1] for t in c["xTicks"]}) == 1, (name, c)  # one unit along an axis
        assert c["yTicks"][0] in ("0", "0.0", "0.00") and len(c["yTicks"]) >= 2, (name, c)
        if name != "loss":  # the queue depth and keys in flight are counts
            assert all(t.isdigit() for t in c["yTicks"]), (name, c)
        x_ticks = x_ticks or c["xTicks"]
        assert c["xTicks"] == x_ticks, (name, c)  # the same time window as the Gantt above
    assert charts["keys"]["yTicks"][-1] in ("1", "2"), charts["keys"]  # max_active_keys = 2: at most 2 in flight
    assert charts["loss"]["y2Unit"] == "accuracy", charts["loss"]
    assert charts["loss"]["y2Ticks"][0] == "0%" and charts["loss"]["y2Ticks"][-1] == "100%", charts["loss"]
    hist = charts["hist"]
    assert hist["xUnit"] == "staleness (updates)" and hist["yUnit"] == "gradients", hist
    assert all(t.isdigit() for t in hist["xTicks"]) and len(hist["yTicks"]) >= 2, hist
    assert all(re.match(r"^\d+k?$", t) for t in hist["yTicks"]), hist  # counts: 500, 1000, ... 10k, 20k

    page.click(f"{LIVE} .amp-stop")
    page.wait_for_selector(f"{LIVE}[data-state='finished']", timeout=WAIT_MS)
    assert not page.errors, page.errors  # type: ignore[attr-defined]
