"""Fixtures for real-browser tests: a JupyterLab server on 127.0.0.1 and a headless Chromium page.

The server runs with temporary ``JUPYTER_*`` directories (config, data, runtime) so it reads nothing of the
user's setup, and with a token. Chromium is the system one (``apt-get install -y chromium``), driven by
Python Playwright; ``playwright install`` is not needed.

When Chromium or Playwright is missing these tests are skipped, unless ``AMP_REQUIRE_BROWSER=1`` is set
(CI sets it): then they fail, so a missing browser cannot hide behind a skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("AMP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAB_START_TIMEOUT_S = 90
WAIT_MS = 90_000  # how long a test waits for something the page should show


def _missing(reason: str) -> None:
    if os.environ.get("AMP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test prerequisites missing: {reason} (AMP_REQUIRE_BROWSER=1 forbids skipping)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str  # e.g. http://127.0.0.1:8899
    token: str
    root: Path  # the server's notebook directory
    log: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        _missing("jupyterlab is not installed (pip install -e '.[notebook]')")
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    env = dict(os.environ)
    for name in ("config", "data", "runtime"):
        (base / name).mkdir()
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "config" / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "config" / "lab-workspaces"),
        IPYTHONDIR=str(base / "ipython"),
        PYTHONUNBUFFERED="1",
    )
    # no "get news?" prompt over the page
    notification = base / "config" / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port = _free_port()
    token = secrets.token_hex(16)
    log = base / "lab.log"
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
        "--LabApp.news_url=", "--LabServerApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + LAB_START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {proc.returncode}; log:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                tail = log.read_text()[-4000:]
                raise RuntimeError(f"JupyterLab did not answer in {LAB_START_TIMEOUT_S} s; log:\n{tail}")
            time.sleep(0.5)
        yield Lab(url=url, token=token, root=root, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        _missing(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium, or set AMP_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)  # lets fixtures see whether the test failed
    return report


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    console: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: msg.type != "debug" and console.append(f"{msg.type}: {msg.text}"))
    pg.errors = errors  # type: ignore[attr-defined]  # JS exceptions seen by the page, for assertions
    try:
        yield pg
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            _show_failure(pg, request, tmp_path, console)
        context.close()


def _show_failure(page: Any, request: pytest.FixtureRequest, tmp_path: Path, console: list[str]) -> None:
    """After a failed browser test: a screenshot, the page's console and the server's log, in the report."""
    shot = tmp_path / "failure.png"
    try:
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the page at failure: {shot}")
    except Exception as exc:  # the page may be gone; the log below still helps
        print(f"no screenshot: {exc}")
    print("browser console (last 40 lines):\n" + "\n".join(console[-40:]))
    if "lab" in request.fixturenames:
        log = request.getfixturevalue("lab").log
        print(f"JupyterLab log {log} (tail):\n{log.read_text(errors='replace')[-6000:]}")


def shutdown_kernels(lab: Lab) -> int:
    """Shut down every kernel the server runs (a test's notebook may leave a background run training, which
    would take the CPU from every later test); returns how many were running."""
    req = urllib.request.Request(f"{lab.url}/api/kernels?token={lab.token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        kernels = json.loads(r.read())
    for k in kernels:
        delete = urllib.request.Request(f"{lab.url}/api/kernels/{k['id']}?token={lab.token}", method="DELETE")
        with urllib.request.urlopen(delete, timeout=30):
            pass
    return len(kernels)


@pytest.fixture(autouse=True)
def _kernels_shut_down_after_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "lab" in request.fixturenames:
        shutdown_kernels(request.getfixturevalue("lab"))


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook with one code cell per source string (nbformat 4, Python 3 kernel)."""
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell{i}",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb))
    return path


def open_and_run(page: Any, lab: Lab, notebook: Path, timeout_s: float = 120) -> None:
    """Open ``notebook`` (a file in ``lab.root``) in JupyterLab, wait for its kernel, and run all cells."""
    page.goto(lab.notebook_url(notebook.name), timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=timeout_s * 1000)
    # the kernel must be idle before "Run All Cells" or the request can be dropped while it starts
    page.wait_for_selector(
        ".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout_s * 1000
    )
    page.click(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor")
    page.keyboard.press("Escape")  # command mode
    _run_all(page, timeout_s)
    # a queued or finished cell shows [*] or [n] in its prompt; a click the menu swallowed shows neither
    started = (
        "() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Cell .jp-InputPrompt')]"
        ".some((p) => /\\[(\\*|\\d+)\\]/.test(p.textContent))"
    )
    try:
        page.wait_for_function(started, timeout=20_000)
    except Exception:  # Playwright's TimeoutError; the menu is asked once more
        _run_all(page, timeout_s)
        page.wait_for_function(started, timeout=timeout_s * 1000)


def _run_all(page: Any, timeout_s: float) -> None:
    """Run All Cells from the main menu (Run > Run All Cells)."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    item = page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first
    item.wait_for(timeout=timeout_s * 1000)
    item.click()


def fit_view(page: Any, root: str) -> None:
    """Click the "fit view" button of the builder ``root`` (a selector) and wait until the fit is drawn.

    React Flow applies a fit a frame or more after the click, once every node is measured; boxes read
    before then are those of the old view. The builder counts the fits it has drawn in data-fit-views."""
    builder = page.locator(root)
    done = int(builder.get_attribute("data-fit-views") or 0)
    builder.locator(".react-flow__controls-fitview").click()
    page.wait_for_selector(f"{root}[data-fit-views='{done + 1}']", state="attached", timeout=WAIT_MS)
