"""A run's settings, declared once: :class:`RunConfig`.

Every setting of a run is one field of :class:`RunConfig`, declared with :func:`setting`: its type (the
annotation), its default, its choices or its minimum, a one-line doc, whether it is a *live knob* (a
background :class:`~amp_notebook.runtime.run.Run` may change it while the run goes; the run starts from the
configured value) and whether a resumed run takes it from the checkpoint. The declarations are data,
:meth:`RunConfig.settings` returns them as :class:`Setting` records, and everything that handles settings
reads them instead of keeping its own list:

* **validation**, once, when a RunConfig is made (``dataclasses.replace`` and :meth:`RunConfig.replace`
  included): a bad value raises :class:`~amp_notebook.errors.SettingError` naming the setting, what it
  expected, what it got and what to pass instead;
* **keywords**: ``train``, ``simulate`` and ``autoplace`` take every setting as a keyword
  (:meth:`RunConfig.from_options`); an unknown one is refused with the list of valid ones and a guess;
* **checkpoints** hold the settings marked ``resumed`` (:meth:`RunConfig.as_json`, read back by
  :meth:`RunConfig.from_json`, which also reads the form older checkpoints wrote); their JSON Schema entry
  is :func:`json_schema`;
* the **Ray backend** ships the config to its actors as JSON; ``TrainResult.summary()`` and its report
  print every setting; the dashboard takes its live knobs' bounds from here; a command line builds its
  options with :mod:`amp_notebook.runtime.config_cli`.

What is *not* a setting: the objects of one call. The graph, the data, initial ``params``, the callbacks
(``on_key_done``, ``on_epoch``), a checkpoint to ``resume`` from, the ``checkpoint`` path to save to, a
simulated machine's ``costs`` (a :class:`~amp_notebook.runtime.costs.CostModel`: per-node measurements,
not a knob) and ``background`` (which picks what the call returns, not how the run trains) stay
keywords of the call that uses them.

Adding a setting is one line here (and the code that uses it); a test checks every declaration's
validation from the declarations themselves.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import NoneType, UnionType
from typing import Any

import numpy as np

from amp_notebook.errors import SettingError
from amp_notebook.optim import DEFAULT_OPTIMIZER, OPTIMIZERS, Optimizer, make_optimizer
from amp_notebook.runtime.controller import MODES
from amp_notebook.runtime.inbox import ORDERS, PRIORITIES
from amp_notebook.runtime.numerics import ON_NONFINITE
from amp_notebook.runtime.placement import STRATEGIES
from amp_notebook.trace.buffers import DEFAULT_CAPACITY

BACKENDS = ("threads", "simulated", "ray")
ENGINES = ("auto", "native", "python")  # the threads backend's worker loops (amp_notebook.engine.choice)
DTYPES = ("float16", "float32", "float64")
AUTO = "auto"  # placement chosen by simulating candidates (amp_notebook.runtime.autoplace)
_META = "amp_notebook.setting"
# what older checkpoints wrote beside ``placement`` (read by RunConfig.from_json)
LEGACY_SCHEMA = {"placement_strategy": {"enum": list(STRATEGIES)}}


class UnknownSettingError(SettingError, TypeError):
    """A keyword that is neither a setting nor an option of the call (a TypeError, as Python's own is)."""


@dataclass(frozen=True)
class Setting:
    """One declared setting, as other code reads it: see the module docstring."""

    name: str
    type: Any  # the annotation, resolved: int, float | None, int | dict[str, int], ...
    default: Any
    doc: str  # one line: what the value means
    choices: tuple[str, ...] = ()  # the strings it may take (other types in ``type`` are checked by type)
    minimum: float | None = None  # every number in the value (dict values included) is at least this
    above: bool = False  # numbers must exceed ``minimum`` rather than reach it
    none: str = ""  # what None means, for a setting that may be None
    live: bool = False  # a background run may change it as it goes (the run starts from this value)
    resumed: bool = True  # a resumed run takes it from the checkpoint unless the call says otherwise
    expected: str = ""  # the accepted values in words, where the type alone would say it badly
    normalize: Callable[[Any], Any] | None = None  # applied before the checks (e.g. a dtype to its name)

    def validate(self, value: Any, where: str = "") -> Any:
        """``value`` normalized, or a :class:`SettingError` naming ``self.name + where``."""
        if self.normalize is not None:
            try:
                value = self.normalize(value)
            except (ValueError, TypeError) as exc:
                raise self.error(value, where, str(exc)) from None
        if not self._fits(value, self.type):
            raise self.error(value, where)
        return value.item() if isinstance(value, np.generic) else value

    def check_each(self, value: Any, where: str = "") -> int | float:
        """One number of a per-node setting (a live knob set for one node): the numeric part of the type and
        the minimum. Returns the value; raises :class:`SettingError` naming ``self.name + where``."""
        numeric = [t for t in type_members(self.type) if t in (int, float)]
        if not any(self._fits(value, t) for t in numeric):
            raise SettingError(self.name, f"{self.name}{where}: expected {_words(numeric[0], self)}, got {value!r}")
        return value  # type: ignore[no-any-return]

    def error(self, value: Any, where: str = "", detail: str = "") -> SettingError:
        found = repr(value)
        found = found if len(found) <= 200 else found[:200] + "..."
        text = f"{self.name}{where}: expected {self.describe()}, got {found}"
        text += f" ({detail})" if detail else ""
        text += f" [{self.name}: {self.doc}]; pass such a value, or leave it out for the default {self.default!r}"
        return SettingError(self.name, text)

    def describe(self) -> str:
        """The accepted values in words: ``an int >= 1``, ``one of ('amp', 'sync', 'pipeline')``, ..."""
        if self.expected:
            text = self.expected
        else:
            text = " or ".join(_words(t, self) for t in type_members(self.type) if t is not NoneType)
        if NoneType in type_members(self.type):
            text += f" or None ({self.none})" if self.none else " or None"
        return text

    def _fits(self, value: Any, tp: Any, inside: bool = False) -> bool:
        """Whether ``value`` is of type ``tp`` within the minimum (and, but ``inside`` a dict, the choices)."""
        if tp is int or tp is float:
            kinds: tuple[type, ...] = (int, np.integer) if tp is int else (int, float, np.integer, np.floating)
            if isinstance(value, bool | np.bool_) or not isinstance(value, kinds):
                return False
            if self.minimum is None:
                return True
            return bool(value > self.minimum) if self.above else bool(value >= self.minimum)
        if tp is str:
            return isinstance(value, str) and (inside or not self.choices or value in self.choices)
        if tp is bool:
            return isinstance(value, bool | np.bool_)
        if tp is NoneType:
            return value is None
        if tp is Any:
            return True
        if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
            return any(self._fits(value, t, inside) for t in typing.get_args(tp))
        if typing.get_origin(tp) is dict:
            key_type, value_type = typing.get_args(tp)
            return isinstance(value, Mapping) and all(
                self._fits(k, key_type, True) and self._fits(v, value_type, True) for k, v in value.items()
            )
        return isinstance(value, tp)

    def to_json(self, value: Any) -> Any:
        """The value as JSON-ready data (an optimizer instance as its spec, dicts copied)."""
        if isinstance(value, Optimizer):
            return value.spec()
        if isinstance(value, Mapping):
            return {k: v.item() if isinstance(v, np.generic) else v for k, v in value.items()}
        return value.item() if isinstance(value, np.generic) else value


def type_members(tp: Any) -> tuple[Any, ...]:
    """The members of a union type (``int | None`` -> ``(int, NoneType)``), or ``(tp,)``."""
    if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def _words(tp: Any, s: Setting) -> str:
    bound = "" if s.minimum is None else f" {'>' if s.above else '>='} {s.minimum:g}"
    if tp is int:
        return f"an int{bound}"
    if tp is float:
        return f"a number{bound}"
    if tp is bool:
        return "True or False"
    if tp is str:
        return f"one of {s.choices}" if s.choices else "a str"
    if typing.get_origin(tp) is dict:
        _, value_type = typing.get_args(tp)
        return f"a dict {{node name: {_words(value_type, s)}}}"
    return getattr(tp, "__name__", str(tp))


# Waiting messages a node may run as one call in an amp run on threads or Ray unless told otherwise (see
# default_max_bundle). Bundled results are those of the messages one by one to the rounding of a larger matrix
# product, and a node that updates locally takes no more gradients than its next update needs.
DEFAULT_MAX_BUNDLE = 16
# The most op time one bundle may hold, in seconds (bundle_budget_s; why: runtime/worker.py, "The bundle budget";
# what it changes for each model: docs/models.md, "Message bundling").
DEFAULT_BUNDLE_BUDGET_S = 500e-6


def default_max_bundle(mode: str, backend: str) -> int:
    """``max_bundle`` when a run names none (None): :data:`DEFAULT_MAX_BUNDLE` for ``amp`` runs on threads or
    Ray, whose schedule (and so the rounding of their sums) varies from run to run anyway; 1 for ``sync`` and
    ``pipeline`` runs, which repeat bit for bit unbundled (a bundle's row count, which the timing decides,
    changes a matrix product's rounding), and for the simulator, whose schedules are exact and bundling
    would change them."""
    return DEFAULT_MAX_BUNDLE if mode == "amp" and backend != "simulated" else 1


def default_priority(workers: int, backend: str) -> str:
    """``priority`` when a run names none (None): ``light_first`` with 2 or more workers on threads or Ray, where
    a light message held behind a heavy op leaves the worker it would route a key to idle
    (:mod:`~amp_notebook.runtime.inbox`; what it gained is measured in ``docs/models.md``); the paper's
    ``backward_first`` with 1 worker, which no other worker waits on, and on the simulator, whose exact
    schedules reproduce the paper's runtime (as ``default_max_bundle``)."""
    return "light_first" if workers > 1 and backend != "simulated" else "backward_first"


def setting(
    default: Any,
    doc: str,
    *,
    choices: Iterable[str] = (),
    minimum: float | None = None,
    above: bool = False,
    none: str = "",
    live: bool = False,
    resumed: bool = True,
    expected: str = "",
    normalize: Callable[[Any], Any] | None = None,
) -> Any:
    """Declare a :class:`RunConfig` field: its default and its :class:`Setting` record (the type is the
    annotation)."""
    record = {
        "doc": doc, "choices": tuple(choices), "minimum": minimum, "above": above, "none": none, "live": live,
        "resumed": resumed, "expected": expected, "normalize": normalize,
    }  # fmt: skip
    return field(default=default, metadata={_META: record})


def _dtype_name(value: Any) -> Any:
    """A float dtype given any way numpy reads one (``"float64"``, ``np.float64``, ``"f8"``) as its name."""
    return np.dtype(value).name if value is not None else value


def _optimizer_spec(value: Any) -> Any:
    """An optimizer name, spec dict or instance, as given, once :func:`make_optimizer` accepts it."""
    if isinstance(value, str | Mapping | Optimizer):
        make_optimizer(value)
    return dict(value) if isinstance(value, Mapping) else value


def _copy_dict(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _placement(value: Any) -> Any:
    """A copy of an overrides dict; None (which ``train`` once took for the default) as the default."""
    return "round_robin" if value is None else _copy_dict(value)


# fmt: off
@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Every setting of a run, validated when made; see the module docstring. ``RunConfig.settings()``
    lists the declarations, ``replace(**changes)`` makes a changed copy (validated again).

    Owns the values a run starts from, and nothing else: it is frozen, so a live knob changed while a run
    goes (``Run.set_max_active_keys``, ...) changes the run, never its config. It never holds the objects of
    one call (the graph, the data, parameters, callbacks, a checkpoint, a cost model) and never runs
    anything: ``train``, ``simulate``, checkpoints, Ray and the dashboard read it."""

    workers: int = setting(2, "the workers (threads, simulated devices or Ray actors) nodes are placed on",
                           minimum=1)
    mode: str = setting("amp", "amp (asynchronous local updates), sync (one key at a time) or pipeline (fill, "
                        "drain, update all)", choices=MODES)
    max_active_keys: int = setting(4, "the most keys in flight at once (amp and pipeline modes)", minimum=1,
                                   live=True)
    min_update_frequency: int = setting(1, "the gradients a node accumulates before it updates (amp mode)",
                                        minimum=1, live=True)
    epochs: int = setting(1, "the epochs to train (a resumed run counts the checkpoint's too)", minimum=1)
    seed: int = setting(0, "the seed of the initial parameters and of the key order", minimum=0)
    dtype: str = setting("float32", "the float type of parameters and payloads", choices=DTYPES,
                         normalize=_dtype_name)
    optimizer: str | dict[str, Any] | Optimizer = setting(  # noqa: RUF009 (a field(); its default is immutable)
        DEFAULT_OPTIMIZER, "the optimizer of nodes that name none themselves", normalize=_optimizer_spec,
        expected=f"an optimizer name {tuple(OPTIMIZERS)}, a dict {{'name': ..., setting: value}} or an Optimizer")
    placement: str | dict[str, int] = setting(  # noqa: RUF009 (a field(); its default is immutable)
        "round_robin", "a placement strategy, 'auto' (simulate candidates, keep the fastest) or "
        "{node name: worker} overrides", choices=(*STRATEGIES, AUTO), minimum=0, normalize=_placement)
    priority: str | None = setting(None, "the inbox order across directions", choices=PRIORITIES,
                                   none="light_first with 2 or more workers on threads or Ray, else backward_first")
    order: str = setting("oldest_key", "the inbox order within a direction", choices=ORDERS)
    max_bundle: int | dict[str, int] | None = setting(  # noqa: RUF009 (a field(); its default is immutable)
        None, "the waiting messages a node runs as one call (1: none), for every node or {node name: int}",
        minimum=1, live=True, normalize=_copy_dict,
        none=f"{DEFAULT_MAX_BUNDLE} for amp runs on threads or Ray, 1 for sync, pipeline and the simulator")
    bundle_budget_s: float | None = setting(
        DEFAULT_BUNDLE_BUDGET_S, "the most op time a bundle may hold, in seconds: a node's waiting messages join a "
        "bundle while their count times the seconds per message that the worker measured for that node and "
        "direction stays within it (the first message always runs)", minimum=0, above=True, none="no limit")
    trace: bool = setting(True, "whether every handled message is traced")
    trace_capacity: int | None = setting(DEFAULT_CAPACITY, "the trace rows kept per worker (the most recent)",
                                         minimum=1, none="keep every row")
    average_every: int | None = setting(None, "replicas also average their parameters after every N training keys "
                                        "of an epoch (admission holds and the keys in flight drain first)",
                                        minimum=1, none="only at each epoch's end")
    validate: bool = setting(True, "whether validation keys run after each epoch's training keys")
    shuffle: bool = setting(True, "whether each epoch shuffles its training keys")
    watchdog_s: float | None = setting(60.0, "the seconds without progress (keys in flight) after which a run "
                                       "stops with a diagnosis", minimum=0, above=True, none="wait forever")
    on_nonfinite: str = setting("raise", "what a NaN or infinity in an input, loss or gradient does: raise, "
                                "skip the key, or ignore it", choices=ON_NONFINITE)
    backend: str = setting("threads", "where the workers run: threads here, simulated hardware in virtual "
                           "time, or Ray actors", choices=BACKENDS, resumed=False)
    engine: str = setting("auto", "what runs the workers of the threads and simulated backends: native loops "
                          "without the GIL, the Python engine, or auto (native when it is built and runs the "
                          "graph)", choices=ENGINES, resumed=False)
    address: str | None = setting(None, "the Ray cluster's 'host:port' (backend 'ray')", resumed=False,
                                  none="start a local Ray")
    checkpoint_every: int = setting(1, "the epochs between checkpoints (train(..., checkpoint=path))", minimum=1,
                                    resumed=False)
    max_failures: int = setting(0, "the times a run restarts from its last checkpoint after losing a worker (a "
                                "worker thread, native worker or Ray actor that died)", minimum=0, resumed=False)
    # fmt: on

    def __post_init__(self) -> None:
        for s in _SETTINGS.values():
            object.__setattr__(self, s.name, s.validate(getattr(self, s.name)))
        if self.average_every is not None and self.backend == "ray":
            raise SettingError(
                "average_every", "average_every= averages replicas within epochs on the threads and simulated "
                "backends; a Ray run averages them at each epoch's end only: leave average_every out"
            )
        if self.address is not None and self.backend != "ray":
            raise SettingError(
                "address", f"address= names a Ray cluster; it needs backend='ray', got {self.backend!r}"
            )

    # ------------------------------------------------------------------ the declarations
    @staticmethod
    def settings() -> tuple[Setting, ...]:
        """Every setting's declaration, in declaration order."""
        return tuple(_SETTINGS.values())

    @staticmethod
    def setting(name: str) -> Setting:
        """One setting's declaration by name (an :class:`UnknownSettingError` with a guess otherwise)."""
        if name not in _SETTINGS:
            raise unknown([name], (), "RunConfig")
        return _SETTINGS[name]

    # ------------------------------------------------------------------ making one
    @classmethod
    def from_options(
        cls, config: RunConfig | None, options: Mapping[str, Any], call: str = "RunConfig", also: Iterable[str] = ()
    ) -> RunConfig:
        """``config`` (default: all defaults) with the settings in ``options`` changed; ``call`` and its other
        keywords ``also`` name the function in the error for an unknown keyword."""
        if config is not None and not isinstance(config, RunConfig):
            raise SettingError(
                "config", f"{call}: config expected a RunConfig or None, got {type(config).__name__}; "
                "pass settings as keywords or as amp.RunConfig(...)"
            )  # fmt: skip
        bad = [name for name in options if name not in _SETTINGS]
        if bad:
            raise unknown(bad, also, call)
        if config is None:
            return cls(**options)
        return dataclasses.replace(config, **options) if options else config

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (setting names), validated."""
        return RunConfig.from_options(self, changes, "RunConfig.replace")

    # ------------------------------------------------------------------ reading one
    @property
    def placement_strategy(self) -> str:
        """The placement strategy: ``placement`` when it names one, else ``round_robin`` (for the nodes its
        overrides leave out)."""
        return self.placement if isinstance(self.placement, str) else "round_robin"

    @property
    def inbox_priority(self) -> str:
        """The inbox priority the workers use: ``priority``, or when None :func:`default_priority`."""
        return self.priority if self.priority is not None else default_priority(self.workers, self.backend)

    @property
    def placement_overrides(self) -> dict[str, int]:
        """``placement`` when it is a dict of node -> worker, else empty."""
        return dict(self.placement) if isinstance(self.placement, Mapping) else {}

    def as_json(self, only: Callable[[Setting], bool] | None = None) -> dict[str, Any]:
        """The settings (those ``only`` keeps) as JSON-ready data, in declaration order."""
        return {s.name: s.to_json(getattr(self, s.name)) for s in _SETTINGS.values() if only is None or only(s)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "config") -> RunConfig:
        """A RunConfig from :meth:`as_json` data; absent settings take their defaults. Also reads the form
        checkpoints took before ``placement`` held strategies too: ``placement`` ({} for none) beside
        ``placement_strategy``."""
        data = dict(data)
        if "placement_strategy" in data:
            strategy = data.pop("placement_strategy")
            data["placement"] = data.get("placement") or strategy
        return cls.from_options(None, data, source)


_SETTINGS: dict[str, Setting] = {}


def _declare() -> None:
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        _SETTINGS[f.name] = Setting(name=f.name, type=hints[f.name], default=f.default, **f.metadata[_META])


_declare()


def unknown(names: Iterable[str], also: Iterable[str], call: str) -> UnknownSettingError:
    """The error for keywords that are neither settings nor among the call's own keywords ``also``."""
    also = tuple(also)
    valid = [*_SETTINGS, *also]
    parts = []
    for name in names:
        guess = difflib.get_close_matches(name, valid, n=1)
        parts.append(f"{name!r}" + (f" (did you mean {guess[0]!r}?)" if guess else ""))
    text = f"{call}: unknown keyword {', '.join(parts)}; the settings are {', '.join(_SETTINGS)}"
    text += f", and {call} also takes {', '.join(also)}" if also else ""
    return UnknownSettingError(", ".join(names), text)


def json_schema(only: Callable[[Setting], bool] | None = None) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) for :meth:`RunConfig.as_json` data of the settings ``only`` keeps, and
    for the older form :meth:`RunConfig.from_json` also reads."""
    properties = {s.name: _schema(s.type, s) for s in _SETTINGS.values() if only is None or only(s)}
    properties.update(LEGACY_SCHEMA)
    return {"type": "object", "description": "the run's settings (RunConfig)", "additionalProperties": False,
            "properties": properties}  # fmt: skip


def _schema(tp: Any, s: Setting) -> dict[str, Any]:
    members = type_members(tp)
    if len(members) > 1:
        return {"anyOf": [_schema(t, s) for t in members]}
    bound = {} if s.minimum is None else {"exclusiveMinimum" if s.above else "minimum": s.minimum}
    if tp is NoneType:
        return {"type": "null"}
    if tp is int:
        return {"type": "integer", **bound}
    if tp is float:
        return {"type": "number", **bound}
    if tp is bool:
        return {"type": "boolean"}
    if tp is str:
        return {"enum": list(s.choices)} if s.choices else {"type": "string"}
    if typing.get_origin(tp) is dict:
        value_type = typing.get_args(tp)[1]
        values = {} if value_type is Any else {"additionalProperties": _schema(value_type, s)}
        return {"type": "object", "maxProperties": 100_000, **values}
    return {"type": "object"}  # an instance: stored as its spec


__all__ = [
    "AUTO", "BACKENDS", "DTYPES", "ENGINES", "RunConfig", "Setting", "UnknownSettingError", "json_schema", "setting",
    "type_members",
]  # fmt: skip
