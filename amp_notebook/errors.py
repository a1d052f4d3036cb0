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
    """A setting given a value it cannot take: a ``train`` keyword or
    :class:`~amp_notebook.runtime.config.RunConfig` field, or a keyword of another public function (a dataset
    or model builder, a benchmark, a widget). ``setting`` names it, and the message says what it expected and
    what to pass."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class SettingTypeError(SettingError, TypeError):
    """A setting given a value of a type it cannot take (a ``TypeError`` too, as before)."""


class DataFormatError(AmpError, ValueError):
    """Data that does not have the form its reader expects: a file's content (the message names the file and
    line), or an instance, key or vocabulary built in Python (the message names it and its field)."""


class DataTypeError(DataFormatError, TypeError):
    """A field of an instance or key holding a value of the wrong type (a ``TypeError`` too, as before)."""


class DataFileNotFoundError(DataFormatError, FileNotFoundError):
    """A data file or directory that is not there; the message says what was looked for and where to get it."""


class RunStateError(AmpError, RuntimeError):
    """A request the run's state does not allow now: a checkpoint of a run still going, a change to a run that
    has ended. The message says what state the run is in and what to do instead."""


__all__ = [
    "AmpError", "DataFileNotFoundError", "DataFormatError", "DataTypeError", "RunStateError", "SettingError",
    "SettingTypeError",
]  # fmt: skip
