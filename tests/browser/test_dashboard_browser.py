"""The dashboard in a real browser: JupyterLab + Chromium (Playwright) run a notebook that trains in the
background and shows the dashboard; the test reads what the canvas drew from the widget's data attributes.

Checks: boxes drawn for every worker; moving the max_active_keys, min_update_frequency and max_bundle
sliders reaches the run (the values shown come back from the run's controller, not from the slider); pause
stops new boxes and resume brings them back; stop ends the run; export writes a Chrome trace; a replay of a
100k-box trace draws, and its draw time is measured and reported (written to ``draw_time.json`` beside the
screenshots), not asserted: timings are figures, not pass/fail conditions; a bundle is one box whose tooltip
lists its keys.
"""

from __future__ import annotations

import json
import time
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
            max_active_keys=2, max_bundle=1, epochs=100_000, seed=0, validate=False,
            optimizer={"name": "sgd", "lr": 0.01})
dash = Dashboard(run, rate_hz=8, export_path="exported_trace.json")
dash
"""

REPLAY = """
import numpy as np
from amp_notebook.trace.io import from_columns
rng = np.random.default_rng(0)
n = 100_000
start = np.sort(rng.uniform(0.0, 1.0, n))
worker = rng.integers(0, 4, n)
events = {"worker": worker, "node": rng.integers(0, 6, n), "phase": rng.integers(0, 3, n), "key": np.arange(n) // 20,
          "depth": rng.integers(0, 5, n), "start": start, "end": start + rng.uniform(1e-6, 4e-5, n)}
staleness = {k: np.zeros(0) for k in ("worker", "node", "key", "value", "time")}
synthetic = from_columns(events, staleness, [f"node{i}" for i in range(6)], workers=4)
replay = Dashboard.replay(synthetic, label="100k boxes", measure_draw=15)
replay
"""

BUNDLES = """
bundle_events = {"worker": np.array([0, 0]), "node": np.array([1, 2]), "phase": np.array([0, 1]),
                 "key": np.array([3, 9]), "depth": np.array([0, 0]), "messages": np.array([5, 1]),
                 "start": np.array([0.0, 0.9]), "end": np.array([0.8, 1.0])}
bundled = from_columns(bundle_events, staleness, ["input", "linear", "relu"], workers=1,
                       bundles={0: [3, 4, 5, 6, 7]})
Dashboard.replay(bundled, label="one bundle")
"""

COMPARE = """
small = models.mlp(input_width=64, hidden=16)
results = [train(small, ds, workers=2, mode=m, max_active_keys=4, epochs=1, seed=0, validate=False)
           for m in ("sync", "amp")]
Dashboard.compare(*results, labels=("sync", "amp"), graph=small)
"""


def attr(page: Any, selector: str, name: str) -> str | None:
    return page.get_attribute(selector, name)


def wait_attr(page: Any, selector: str, js_condition: str, timeout_ms: int = WAIT_MS) -> None:
    """Wait until ``js_condition`` (a JS expression over ``el``, the first element matching ``selector``) holds."""
    page.wait_for_function(
        f"() => {{ const el = document.querySelector({json.dumps(selector)}); return !!el && ({js_condition}); }}",
        timeout=timeout_ms,
    )


def boxes(page: Any, selector: str) -> int:
    return int(attr(page, selector, "data-boxes") or 0)


def move_slider(page: Any, selector: str, value: float) -> None:
    page.locator(selector).evaluate(
        """(el, v) => { el.value = String(v); el.dispatchEvent(new Event('input', {bubbles: true}));
                        el.dispatchEvent(new Event('change', {bubbles: true})); }""",
        value,
    )


def test_dashboard_live_controls_and_replay(lab: Any, page: Any, tmp_path: Path) -> None:
    nb = write_notebook(lab.root / "dashboard_e2e.ipynb", [SETUP, REPLAY, BUNDLES, COMPARE])
    open_and_run(page, lab, nb)
    live = '.amp-dashboard[data-mode="live"]'
    replay = '.amp-dashboard[data-mode="replay"]'

    # every worker drew boxes
    wait_attr(page, live, "el.dataset.boxesPerWorker && JSON.parse(el.dataset.boxesPerWorker).every(n => n > 0)")
    per_worker = json.loads(attr(page, live, "data-boxes-per-worker") or "[]")
    assert len(per_worker) == 2 and all(n > 0 for n in per_worker), per_worker
    wait_attr(page, live, "el.dataset.state === 'running'")
    assert int(attr(page, live, "data-drawn") or 0) > 0
    page.screenshot(path=str(tmp_path / "dashboard_live.png"), full_page=True)

    # sliders reach the run: the value shown is the controller's, echoed by Python
    assert attr(page, live, "data-run-max-active-keys") == "2"
    move_slider(page, f"{live} .amp-mak", 7)
    wait_attr(page, live, "el.dataset.runMaxActiveKeys === '7'")
    move_slider(page, f"{live} .amp-muf", 5)
    wait_attr(page, live, "el.dataset.runMinUpdateFrequency === '5'")
    assert attr(page, live, "data-run-max-bundle") == "1"
    move_slider(page, f"{live} .amp-bundle", 8)
    wait_attr(page, live, "el.dataset.runMaxBundle === '8'")

    # pause stops new boxes (once the work in hand has drained and been sent), resume brings them back
    page.click(f"{live} .amp-pause")
    wait_attr(page, live, "el.dataset.state === 'paused'")
    time.sleep(1.5)
    held = boxes(page, live)
    time.sleep(2.0)
    assert boxes(page, live) == held, "boxes kept arriving while paused"
    page.screenshot(path=str(tmp_path / "dashboard_paused.png"), full_page=True)
    page.click(f"{live} .amp-resume")
    wait_attr(page, live, f"Number(el.dataset.boxes) > {held}")

    # export from the widget writes a Chrome trace next to the notebook
    page.click(f"{live} .amp-export")
    wait_attr(page, live, "!!el.dataset.exported")
    exported = Path(attr(page, live, "data-exported") or "")
    doc = json.loads(exported.read_text())
    assert any(e["ph"] == "X" for e in doc["traceEvents"])

    # stop ends the run
    page.click(f"{live} .amp-stop")
    wait_attr(page, live, "el.dataset.state === 'finished'")

    # replay of 100k boxes: drawn in full, draw time measured in the browser
    wait_attr(page, replay, "!!el.dataset.drawMsMedian")
    drawn = int(attr(page, replay, "data-measured-boxes") or 0)
    assert drawn == 100_000, drawn
    median_ms = float(attr(page, replay, "data-draw-ms-median") or "nan")
    page.locator(replay).first.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "dashboard_replay.png"), full_page=True)
    report = {"boxes": drawn, "draw_ms_median": median_ms, "screenshots": str(tmp_path)}
    (tmp_path / "draw_time.json").write_text(json.dumps(report))
    print(f"\nreplay of {drawn} boxes: median draw {median_ms:.1f} ms (artifacts in {tmp_path})")

    # hover shows a box's details; the time slider replays up to a time; the wheel zooms
    gantt = page.locator(replay).first.locator("canvas.amp-gantt")
    box = gantt.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 18 + 26 / 2)  # axis, then the middle of lane 0
    tip = page.locator(replay).first.locator(".amp-tip")
    tip.wait_for(state="visible", timeout=10_000)
    assert "key" in tip.inner_text() and "worker 0" in tip.inner_text()
    move_slider(page, f"{replay} >> nth=0 >> .amp-time", 0.5)  # show the run as it was at t = 0.5 s
    wait_attr(page, replay, "Number(el.dataset.drawn) < 60000 && Number(el.dataset.drawn) > 40000")
    page.mouse.wheel(0, -600)  # zoom in around the pointer
    wait_attr(page, replay, "Number(el.dataset.drawn) < 40000")

    # a bundle is one box; hovering over it lists the keys of its messages
    one_bundle = '.amp-dashboard[data-mode="replay"] >> nth=1'
    bundle_view = page.locator(one_bundle)
    bundle_view.scroll_into_view_if_needed()
    canvas = page.locator(f"{one_bundle} >> canvas.amp-gantt")
    area = canvas.bounding_box()
    assert area is not None
    page.mouse.move(area["x"] + 74 + 40, area["y"] + 18 + 26 / 2)  # past the lane labels, in the bundle's box
    bundle_tip = page.locator(f"{one_bundle} >> .amp-tip")
    bundle_tip.wait_for(state="visible", timeout=10_000)
    assert "bundle of 5 messages, keys 3, 4, 5, 6, 7" in bundle_tip.inner_text(), bundle_tip.inner_text()
    page.screenshot(path=str(tmp_path / "dashboard_bundle.png"), full_page=True)

    # two runs, one above the other: every lane of both drew boxes
    compare = '.amp-dashboard[data-mode="compare"]'
    wait_attr(page, compare, "el.dataset.boxesPerWorker && JSON.parse(el.dataset.boxesPerWorker).length === 4")
    lanes = json.loads(attr(page, compare, "data-boxes-per-worker") or "[]")
    assert all(n > 0 for n in lanes), lanes
    page.check(f"{compare} .amp-arrows")  # message arrows: drawn, or "zoom in" when too many boxes are in view
    wait_attr(page, compare, "el.dataset.arrows !== undefined")
    page.locator(compare).scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "dashboard_compare.png"), full_page=True)
    assert not page.errors, page.errors  # type: ignore[attr-defined]
