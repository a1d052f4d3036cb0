"""The engine's tests need the extension: without it they fail (never skip), unless the build was skipped on
purpose with AMP_NATIVE=0."""

from __future__ import annotations

import os

import pytest

from amp_notebook import engine


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if engine.available() or os.environ.get("AMP_NATIVE", "1") != "0":
        return
    skip = pytest.mark.skip(reason="AMP_NATIVE=0: the native engine was not built on purpose")
    for item in items:
        if "tests/engine" in str(item.fspath) and "test_unavailable" not in str(item.fspath):
            item.add_marker(skip)
