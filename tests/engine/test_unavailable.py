"""Without the extension the package still imports, the engine reports itself unavailable, and asking for it by
name raises a clear AmpError (never a silent fallback)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["amp_notebook.engine._native"] = None  # as if the build was skipped (AMP_NATIVE=0)
import amp_notebook
from amp_notebook import engine
from amp_notebook.errors import AmpError
assert not engine.available()
status = engine.status()
assert status["available"] is False and status["reason"], status
try:
    engine.native()
except engine.EngineUnavailableError as exc:
    assert isinstance(exc, AmpError) and isinstance(exc, RuntimeError)
    assert "pip install -e ." in str(exc) and "engine='python'" in str(exc), exc
    print("refused")
"""


def test_without_the_extension_the_engine_is_unavailable_and_named_requests_fail_clearly() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused"
