"""Command-line options from the settings' declarations: one ``--name`` per :class:`RunConfig` setting.

:func:`add_setting_arguments` adds an option per setting to an ``argparse`` parser: ``--max-active-keys``
for ``max_active_keys``, with the declaration's doc and accepted values as its help, its choices, and a
converter that checks the value as ``RunConfig`` does (a bad one is an ordinary argparse error naming the
option). Booleans get ``--trace`` / ``--no-trace``; a setting that may be None takes ``none``. Values that
only Python can give (a per-node dict, an ``Optimizer`` instance) are left to Python: the option takes the
scalar form. :func:`settings_from_args` reads the parsed values back as ``train`` keywords.

    parser = argparse.ArgumentParser()
    add_setting_arguments(parser, ["workers", "mode", "max_active_keys"], defaults={"epochs": 3})
    config = RunConfig(**settings_from_args(parser.parse_args()))
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from types import NoneType
from typing import Any

from amp_notebook.errors import SettingError
from amp_notebook.runtime.config import RunConfig, Setting, type_members


def option(name: str) -> str:
    """The command-line option of setting ``name``: ``--max-active-keys`` for ``max_active_keys``."""
    return "--" + name.replace("_", "-")


def add_setting_arguments(
    parser: argparse.ArgumentParser | Any, names: Iterable[str] | None = None, defaults: Mapping[str, Any] | None = None
) -> None:
    """Add one option per setting (``names``, default every setting, in declaration order) to ``parser`` (or an
    argument group); ``defaults`` replace declared defaults on this command line."""
    chosen = [RunConfig.setting(n) for n in names] if names is not None else list(RunConfig.settings())
    defaults = dict(defaults or {})
    for s in chosen:
        default = defaults.get(s.name, s.default)
        members = type_members(s.type)
        help_text = f"{s.doc}; {s.describe()} (default: {default!r})".replace("%", "%%")
        if members == (bool,):
            parser.add_argument(
                option(s.name), dest=s.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
            continue
        parser.add_argument(
            option(s.name), dest=s.name, type=_converter(s), default=default, help=help_text, metavar=_metavar(s)
        )


def settings_from_args(args: argparse.Namespace, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The settings parsed by :func:`add_setting_arguments` (those of ``names``, default all present in
    ``args``) as keywords for ``train`` / ``RunConfig``."""
    wanted = names if names is not None else [s.name for s in RunConfig.settings()]
    return {n: getattr(args, n) for n in wanted if hasattr(args, n)}


def _metavar(s: Setting) -> str:
    if s.choices:
        return "{" + ",".join(s.choices) + "}"
    numeric = [t for t in type_members(s.type) if t in (int, float)]
    return ("N" if numeric[0] is int else "X") if numeric else "TEXT"


def _converter(s: Setting) -> Any:
    """text -> value for ``s``: ``none`` where None is allowed, else the first scalar type that reads it;
    then the setting's own check."""
    members = type_members(s.type)

    def convert(text: str) -> Any:
        value: Any = text
        if NoneType in members and text.lower() == "none":
            value = None
        elif int in members:
            value = _number(text, int)
        elif float in members:
            value = _number(text, float)
        try:
            return s.validate(value)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = s.name  # argparse names the converter in its "invalid value" message
    return convert


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        return text  # refused by the setting's check, with its message


__all__ = ["add_setting_arguments", "option", "settings_from_args"]
