"""Screenshots that the README and the documentation show, written by the browser tests that make them.

They go to ``docs/images/`` in the repository (or ``$AMP_SCREENSHOT_DIR``), so every run of the browser
tests leaves current pictures there; commit them when they change. Each is of one widget, not the page, and
must stay under ``MAX_BYTES`` so the repository does not grow with every update.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
MAX_BYTES = 300_000


def save_screenshot(target: Any, name: str) -> Path:
    """A PNG of ``target`` (a Playwright locator) as ``name`` in the screenshot folder; returns its path."""
    folder = Path(os.environ.get("AMP_SCREENSHOT_DIR") or IMAGES)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    target.screenshot(path=str(path), animations="disabled", caret="hide")
    size = path.stat().st_size
    assert size < MAX_BYTES, f"{path}: {size} bytes; keep screenshots under {MAX_BYTES} (a smaller widget view)"
    return path
