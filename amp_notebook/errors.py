"""``AmpError``: the one base class of every error amp_notebook raises on bad input.

Every exception class of the package derives from :class:`AmpError` *and* keeps the built-in base it always
had (``GraphError`` is still a ``ValueError``, ``NodeError`` a ``RuntimeError``), so both of these work::

    try:
        graph = amp.load_graph("from_a_colleague.json")
    except amp.AmpError as exc:          # anything amp_notebook refused
        print(exc)

    except ValueError:                   # what older code caught
        ...

A message names the culprit (the node, port, field or JSON path), what was expected, what was found, and
how to fix it. Errors that are not ``AmpError`` (a ``TypeError`` from deep inside numpy, say) are bugs:
``tests/test_errors.py`` enumerates the package's exception classes so that none can miss this base, and
the fuzzers in :mod:`amp_notebook.testing.fuzz` feed random graphs and builder intents to check that
nothing else escapes.
"""

from __future__ import annotations


class AmpError(Exception):
    """Base class of every error amp_notebook raises on bad input (graphs, data, configurations, messages)."""


class SettingError(AmpError, ValueError):
    """A run setting (a ``train`` keyword, a :class:`~amp_notebook.runtime.config.RunConfig` field) given a
    value it cannot take; ``setting`` names it, and the message says what it expected and what to pass."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


__all__ = ["AmpError", "SettingError"]
