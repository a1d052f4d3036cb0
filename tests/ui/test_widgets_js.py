"""The widgets' front-end unit tests (``node --test widgets/test``), run from pytest so CI runs them.

Node is needed to install the package at all (the widget bundles are built at install), so a missing
node fails here rather than being skipped.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

WIDGETS = Path(__file__).resolve().parents[2] / "widgets"


def test_front_end_unit_tests_pass() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: it is needed to build and test the widgets (see README)"
    done = subprocess.run([node, "--test", "test/"], cwd=WIDGETS, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
