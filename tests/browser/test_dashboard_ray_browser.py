"""The live dashboard on a Ray run, in a real browser: JupyterLab runs a notebook that trains the MLP with
``backend="ray"`` (a local Ray started by the kernel, one actor per worker) in the background and shows
``Dashboard(run)``. The actors' trace rows travel to the kernel and on to the canvas: every worker's lane
draws boxes, the live state is shown, and stop from the widget ends the run and leaves no actor behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_MS, open_and_run, write_notebook
from tests.browser.test_dashboard_browser import attr, wait_attr

pytestmark = pytest.mark.browser

SETUP = """
from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.train import train
from amp_notebook.runtime.backends import ray as amp_ray
from amp_notebook.ui.dashboard import Dashboard
ds = load_digits_dataset(batch_size=50, seed=0)
run = train(models.mlp(input_width=64, hidden=64), ds, background=True, backend="ray", workers=3, mode="amp",
            max_active_keys=3, epochs=100_000, seed=0, validate=False, optimizer={"name": "sgd", "lr": 0.01})
Dashboard(run, rate_hz=8)
"""

# once the run has ended (stopped from the widget), count its actors still alive; a thread, so the kernel
# stays free to take the widget's messages
CHECK_ACTORS = """
import json, pathlib, threading, time
def check_actors():
    while not run.done:
        time.sleep(0.2)
    deadline = time.monotonic() + 60
    while amp_ray.live_actors() and time.monotonic() < deadline:
        time.sleep(0.2)
    found = {"state": run.state, "left": len(amp_ray.live_actors())}
    pathlib.Path("ray_actors_left.json").write_text(json.dumps(found))
threading.Thread(target=check_actors, daemon=True).start()
"""


def test_dashboard_draws_a_ray_runs_boxes_for_every_worker(lab: Any, page: Any, tmp_path: Path) -> None:
    nb = write_notebook(lab.root / "dashboard_ray.ipynb", [SETUP, CHECK_ACTORS])
    open_and_run(page, lab, nb, timeout_s=WAIT_MS / 1000)
    live = '.amp-dashboard[data-mode="live"]'
    wait_attr(page, live, "el.dataset.boxesPerWorker && JSON.parse(el.dataset.boxesPerWorker).every(n => n > 0)")
    per_worker = json.loads(attr(page, live, "data-boxes-per-worker") or "[]")
    assert len(per_worker) == 3 and all(n > 0 for n in per_worker), per_worker
    wait_attr(page, live, "el.dataset.state === 'running'")
    page.screenshot(path=str(tmp_path / "dashboard_ray_live.png"), full_page=True)

    page.click(f"{live} .amp-stop")
    wait_attr(page, live, "el.dataset.state === 'finished'")

    # the run's actors are gone (the notebook's second cell counts them once the run has ended)
    result = lab.root / "ray_actors_left.json"
    waited_ms = 0
    while not result.exists() and waited_ms < WAIT_MS:
        page.wait_for_timeout(500)
        waited_ms += 500
    assert result.exists(), "the notebook did not report the actors left"
    found = json.loads(result.read_text())
    assert found == {"state": "finished", "left": 0}, found
