"""The README and the documentation site: the README stays a first-five-minutes page whose commands are the
ones CI runs, and the site builds with ``mkdocs build --strict`` (every link, anchor and API reference resolves).

The build needs the ``docs`` extra; without it the build test is skipped, except where ``AMP_REQUIRE_DOCS=1``
(``.ci/run`` sets it, and the README's test command, which ``tests/test_packaging.py`` holds to ``.ci/run``,
installs the extra), so CI never skips it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SCREENSHOTS = ("docs/images/dashboard.png", "docs/images/builder.png")


def test_readme_is_short_and_shows_the_dashboard_and_the_builder() -> None:
    assert len(README.splitlines()) <= 200
    for path in SCREENSHOTS:  # written by the browser tests (tests/browser/screenshots.py)
        assert f"]({path})" in README and (ROOT / path).is_file()


def test_the_ideas_are_explained_before_they_are_used() -> None:
    ideas = README.index("## The ideas in one minute")
    for word in ("Isu", "Phi", "key", "credit"):
        assert README.index(word) > ideas, f"the README uses {word!r} before explaining it"


def docs_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("mkdocs", "material", "mkdocstrings_handlers"))


def test_the_documentation_site_builds_strictly(tmp_path: Path) -> None:
    if not docs_installed():
        if os.environ.get("AMP_REQUIRE_DOCS") == "1":
            pytest.fail("AMP_REQUIRE_DOCS=1 but the docs extra is not installed: pip install -e '.[docs]'")
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reference = (tmp_path / "site" / "api" / "train" / "index.html").read_text(encoding="utf-8")
    assert "max_active_keys" in reference  # the API reference was read from the docstrings


@pytest.mark.slow
def test_the_readme_example_runs(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(example.splitlines()) <= 60
    (tmp_path / "example.py").write_text(example, encoding="utf-8")  # a file: amp.compile reads the source
    proc = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "True finished" in proc.stdout and (tmp_path / "run.json").exists()
