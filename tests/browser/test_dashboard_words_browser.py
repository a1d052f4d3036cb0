"""What the dashboard says, in a real browser (JupyterLab + Chromium): numbers and words for people.

Checks: a live run's status line counts epochs from 1, writes rates with thousands separators (never
"1.556e+4") and calls its loss and accuracy training figures; a run that ended before its view opened (a
notebook's Run All) shows its rate over the whole run (not "0.000 instances/s") and the keys it had in
flight, rebuilt from its rows as a replay does (it once showed 0); a replay of one epoch draws that epoch's
loss as a dot, and a trace without epochs says so instead of an empty chart under a legend; a flush's
update box is labelled and described as a flush, not as key -7; a native run's status has a line of where
each worker's time went (its share without a core once the run has ended).

It also writes ``docs/images/dashboard.png``: the live dashboard of the paper's Fig. 2 RNN training.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook
from tests.browser.screenshots import save_screenshot
from tests.browser.test_dashboard_browser import wait_attr

pytestmark = pytest.mark.browser

LIVE = """
import amp_notebook as amp
from amp_notebook.ui.dashboard import Dashboard
lists = amp.data.list_reduction_dataset(n_train=4_000, n_val=300, seed=0)
run = amp.train(amp.models.rnn(), lists, background=True, workers=3, mode="amp", max_active_keys=8, epochs=1_000,
                seed=0, optimizer={"name": "adam", "lr": 3e-3})
Dashboard(run, rate_hz=8)
"""

SHORT = """
from amp_notebook.data import load_digits_dataset
digits = load_digits_dataset(batch_size=20, seed=0)
short = amp.train(amp.models.mlp(input_width=64, hidden=16), digits, background=True, workers=2, mode="amp",
                  max_active_keys=4, epochs=2, seed=0, validate=False)
short.wait()
Dashboard(short)
"""

REPLAYS = """
import numpy as np
from amp_notebook.trace.io import from_columns
one_epoch = amp.train(amp.models.mlp(input_width=64, hidden=16), digits, workers=2, max_active_keys=4, epochs=1, seed=0)
Dashboard.replay(one_epoch, label="one epoch")
"""

FLUSH = """
events = {"worker": np.array([0, 0]), "node": np.array([1, 1]), "phase": np.array([1, 2]),
          "key": np.array([5, -7]), "depth": np.array([0, 0]),
          "start": np.array([0.0, 0.5]), "end": np.array([0.45, 1.0])}
staleness = {k: np.zeros(0) for k in ("worker", "node", "key", "value", "time")}
Dashboard.replay(from_columns(events, staleness, ["x", "linear"], workers=1), label="a flush")
"""

STATUS = re.compile(
    r"^epoch [1-9]\d*/1,?000 · keys done [\d,]+ · in flight \d+ · [\d,.]+ instances/s · "
    r"recent train loss [\d.]+ · recent train accuracy [\d.]+% · utilization( \d+%)+ · "
)


def pixels_of(page: Any, selector: str, rgb: tuple[int, int, int]) -> int:
    """How many pixels of the chart at ``selector``, below its title row (where the legend is), have the
    colour ``rgb`` (within 12 per channel)."""
    return int(
        page.evaluate(
            """([sel, rgb]) => {
                 const c = document.querySelector(sel);
                 const top = Math.ceil(22 * c.width / c.clientWidth);
                 const d = c.getContext('2d').getImageData(0, top, c.width, c.height - top).data;
                 const near = (i) => [0, 1, 2].every((k) => Math.abs(d[i + k] - rgb[k]) < 12);
                 let n = 0;
                 for (let i = 0; i < d.length; i += 4) if (near(i)) n++;
                 return n; }""",
            [selector, list(rgb)],
        )
    )


def test_the_dashboard_speaks_to_people(lab: Any, page: Any) -> None:
    page.set_viewport_size({"width": 1400, "height": 1100})
    nb = write_notebook(lab.root / "dashboard_words.ipynb", [LIVE, SHORT, REPLAYS, FLUSH])
    open_and_run(page, lab, nb)
    live = '.amp-dashboard[data-mode="live"]'
    stats = page.locator(f"{live} .amp-stats").first

    # a live run: epochs from 1, rates for people, training figures called so
    wait_attr(page, live, "el.dataset.state === 'running' && /train accuracy \\d/.test(el.textContent)")
    text = stats.inner_text()
    assert STATUS.match(text), text
    assert "e+" not in text, text
    # the native engine's own count of where each worker's time goes, on a line of its own
    assert re.search(r"\nworker time: w0 ops \d+% · engine \d+% · waiting \d+%; w1 ", text), text
    assert "no core" not in text, text  # a loop's CPU time is known once it has ended

    # a run that ended before its view opened: its whole-run rate and the keys it had in flight
    short = page.locator(live).nth(1)
    short.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const d = document.querySelectorAll('.amp-dashboard[data-mode=\"live\"]')[1];"
        " return d && d.dataset.state === 'finished' && d.querySelector('canvas.amp-keys').dataset.yTicks; }",
        timeout=WAIT_MS,
    )
    ended = short.locator(".amp-stats").inner_text()
    whole_run = r"^epoch 2/2 · keys done [\d,]+ · in flight 0 \(at most 4\) · [\d,]+ instances/s over the run"
    assert re.match(whole_run, ended), ended
    assert "0.000" not in ended, ended
    assert re.search(r"\nworker time: w0 ops \d+% .* no core \d+%; w1 ", ended), ended
    keys_ticks = json.loads(short.locator("canvas.amp-keys").get_attribute("data-y-ticks") or "[]")
    assert int(keys_ticks[-1]) >= 4, keys_ticks  # the axis reaches the 4 keys in flight (it once stayed at 0-1)

    # a replay of one epoch: its loss shows (a dot), in the legend and on the canvas
    one = '.amp-dashboard[data-mode="replay"]'
    page.locator(one).first.scroll_into_view_if_needed()
    wait_attr(page, f"{one} canvas.amp-loss", "!!el.dataset.legend && el.dataset.legend.includes('epoch train loss')")
    assert pixels_of(page, f"{one} canvas.amp-loss", (0xE6, 0x7E, 0x22)) > 10  # the epoch train loss colour

    # a trace with no epochs: the loss chart says so, and has no legend
    flush = '.amp-dashboard[data-mode="replay"] >> nth=1'
    view = page.locator(flush)
    view.scroll_into_view_if_needed()
    loss = view.locator("canvas.amp-loss")
    page.wait_for_function(
        "() => { const d = document.querySelectorAll('.amp-dashboard[data-mode=\"replay\"]')[1];"
        " return d && d.dataset.labels && d.querySelector('canvas.amp-loss').dataset.legend; }",
        timeout=WAIT_MS,
    )
    assert json.loads(loss.get_attribute("data-legend") or "null") == []
    # the flush's box is labelled as a flush, and its tooltip says so
    labels = json.loads(view.get_attribute("data-labels") or "[]")
    assert labels == ["5", "flush 7"], labels
    gantt = view.locator("canvas.amp-gantt")
    area = gantt.bounding_box()
    assert area is not None
    plot_w = area["width"] - 74 - 44
    page.mouse.move(area["x"] + 74 + 0.75 * plot_w, area["y"] + 18 + 26 / 2)  # the update box, lane 0
    tip = view.locator(".amp-tip")
    tip.wait_for(state="visible", timeout=10_000)
    assert "flush 7" in tip.inner_text() and "-7" not in tip.inner_text(), tip.inner_text()

    # the picture of the live dashboard, after a few seconds of training
    page.locator(live).first.scroll_into_view_if_needed()
    wait_attr(page, live, "Number(el.dataset.boxes) > 20000", timeout_ms=WAIT_MS)
    page.mouse.move(0, 0)
    shot = save_screenshot(page.locator(live).first, "dashboard.png")
    print(f"dashboard: {shot}")
    assert not page.errors, page.errors  # type: ignore[attr-defined]
