"""RunConfig: every setting declared once, validated once, and read by everything that handles settings.

The validation cases are generated from the declarations themselves, so a new setting is covered the
moment it is declared: each must accept its default, its choices, its minimum and None where declared,
and refuse a value of no accepted type, a number below its minimum and a string outside its choices, with
a SettingError naming it. The keyword paths (``train``, ``simulate``, ``autoplace``) must refuse what
RunConfig refuses, before any work, and refuse an unknown keyword with a guess.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from types import NoneType
from typing import Any

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook import models
from amp_notebook.errors import AmpError, SettingError
from amp_notebook.optim import SGD
from amp_notebook.runtime import simulate as runtime_simulate
from amp_notebook.runtime.autoplace import autoplace
from amp_notebook.runtime.config import RunConfig, Setting, UnknownSettingError, type_members
from amp_notebook.runtime.config_cli import add_setting_arguments, option, settings_from_args
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.launch import simulate
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import CALL_OPTIONS, TrainResult, train
from tests.conftest import digits_dataset


class Foreign:
    """A value of no type any setting accepts (a stable repr for test ids)."""

    def __repr__(self) -> str:
        return "Foreign()"


SETTINGS = RunConfig.settings()
NAMES = [s.name for s in SETTINGS]


def small_mlp():
    return models.mlp(input_width=64, hidden=16)


def accepted(s: Setting) -> list[Any]:
    """Values the declaration says ``s`` takes."""
    members = type_members(s.type)
    values: list[Any] = [s.default, *s.choices]
    if NoneType in members:
        values.append(None)
    for kind in (int, float):
        if kind in members and s.minimum is not None:
            values.append(kind(s.minimum) + (1 if s.above else 0))
    if any(getattr(t, "__origin__", None) is dict for t in members) and s.minimum is not None:
        values.append({"linear1": int(s.minimum) + (1 if s.above else 0)})
    return values


def refused(s: Setting) -> list[Any]:
    """Values the declaration says ``s`` refuses."""
    members = type_members(s.type)
    values: list[Any] = [Foreign()]
    if s.choices:
        values.append("no-such-choice")
    for kind in (int, float):
        if kind in members and s.minimum is not None:
            values.append(kind(s.minimum) - (0 if s.above else 1))
    if int in members:
        values.append(2.5)
    if (int in members or float in members or bool in members) and str not in members:
        values.append("1")
    if bool in members or int in members:
        values.append(True if bool not in members else 1)
    if any(getattr(t, "__origin__", None) is dict for t in members) and s.minimum is not None:
        values.append({"linear1": int(s.minimum) - 1})
    return values


CASES_OK = [(s.name, v) for s in SETTINGS for v in accepted(s)]
CASES_BAD = [(s.name, v) for s in SETTINGS for v in refused(s)]


@pytest.mark.parametrize(("name", "value"), CASES_OK, ids=[f"{n}={v!r}" for n, v in CASES_OK])
def test_every_setting_takes_what_its_declaration_accepts(name: str, value: Any) -> None:
    extra = {"backend": "ray"} if name == "address" and value is not None else {}
    config = RunConfig(**{name: value}, **extra)
    assert getattr(config, name) == value
    assert config.replace(**{name: value}) == config


@pytest.mark.parametrize(("name", "value"), CASES_BAD, ids=[f"{n}={v!r}" for n, v in CASES_BAD])
def test_every_setting_refuses_what_its_declaration_refuses(name: str, value: Any, digits) -> None:
    with pytest.raises(SettingError) as err:
        RunConfig(**{name: value})
    e = err.value
    assert isinstance(e, AmpError) and isinstance(e, ValueError) and e.setting == name
    text = str(e)
    assert text.startswith(f"{name}: expected "), text
    assert "got" in text and "default" in text  # what it found, and what to pass instead
    with pytest.raises(SettingError, match=f"^{name}: expected"):  # the keyword path refuses it before any work
        train(small_mlp(), digits, **{name: value})
    with pytest.raises(SettingError, match=f"^{name}: expected"):
        RunConfig().replace(**{name: value})


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(batch_size=50)


def test_declarations_are_complete_and_readable() -> None:
    assert len(NAMES) == len(set(NAMES)) >= 20
    for s in SETTINGS:
        assert s.doc and s.doc[0].islower() and not s.doc.endswith("."), s.name
        assert s.describe()
        if s.choices:
            assert str in type_members(s.type)
    assert RunConfig().as_json() == {s.name: s.default for s in SETTINGS}
    assert RunConfig.from_json(RunConfig().as_json()) == RunConfig()


def test_live_knobs_are_the_settings_a_run_can_change() -> None:
    live = {s.name for s in SETTINGS if s.live}
    setters = {name.removeprefix("set_") for name, _ in inspect.getmembers(Run) if name.startswith("set_")}
    assert live == setters


def test_configs_are_immutable_and_copied_on_change() -> None:
    overrides = {"linear1": 1}
    config = RunConfig(placement=overrides, max_bundle={"linear2": 4})
    overrides["linear1"] = 0
    assert config.placement == {"linear1": 1}  # its own copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 3  # type: ignore[misc]
    assert config.replace(workers=3).workers == 3 and config.workers == 2
    assert config.placement_overrides == {"linear1": 1} and config.placement_strategy == "round_robin"
    assert RunConfig(placement="balanced").placement_strategy == "balanced"
    assert RunConfig(dtype=np.float64).dtype == "float64" and RunConfig(workers=np.int64(3)).workers == 3


def test_the_inbox_priority_follows_the_worker_count_unless_named() -> None:
    """None (the default) is light_first with 2 or more workers on threads or Ray, backward_first with 1 and on
    the simulator; a named one is kept, also when the worker count changes."""
    assert RunConfig().priority is None
    assert RunConfig(workers=2, backend="simulated").inbox_priority == "backward_first"
    assert [RunConfig(workers=n).inbox_priority for n in (1, 2, 16)] == ["backward_first", "light_first", "light_first"]
    for named in ("backward_first", "fifo", "light_first"):
        config = RunConfig(workers=1, priority=named)
        assert config.inbox_priority == named and config.replace(workers=4).inbox_priority == named
    assert RunConfig(workers=1).replace(workers=2).inbox_priority == "light_first"


def test_settings_that_go_together_are_checked_together() -> None:
    with pytest.raises(SettingError, match="address= names a Ray cluster; it needs backend='ray'"):
        RunConfig(address="head:6379")
    assert RunConfig(address="head:6379", backend="ray").address == "head:6379"


def test_train_takes_a_config_and_keyword_overrides(digits) -> None:
    config = RunConfig(mode="sync", epochs=1, seed=3, dtype="float64", optimizer={"name": "sgd", "lr": 0.05})
    r = train(small_mlp(), digits, config, workers=3, validate=False)
    assert isinstance(r, TrainResult)
    assert r.config == config.replace(workers=3, validate=False)
    same = train(small_mlp(), digits, mode="sync", epochs=1, seed=3, dtype="float64",
                 optimizer={"name": "sgd", "lr": 0.05}, workers=3, validate=False)  # fmt: skip
    assert isinstance(same, TrainResult)
    for node, group in r.params.items():
        for k, v in group.items():
            assert np.array_equal(v, same.params[node][k]), (node, k)
    with pytest.raises(SettingError, match="config expected a RunConfig"):
        train(small_mlp(), digits, {"mode": "sync"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keyword", "guess"),
    [("max_active_key", "max_active_keys"), ("on_epochs", "on_epoch"), ("worker", "workers"), ("param", "params")],
)
def test_an_unknown_keyword_is_refused_with_a_guess_and_the_valid_ones(digits, keyword: str, guess: str) -> None:
    with pytest.raises(UnknownSettingError) as err:
        train(small_mlp(), digits, **{keyword: 2})
    e = err.value
    assert isinstance(e, TypeError) and isinstance(e, SettingError)  # the TypeError Python would raise, too
    text = str(e)
    assert f"unknown keyword {keyword!r} (did you mean {guess!r}?)" in text
    assert all(name in text for name in NAMES) and all(name in text for name in CALL_OPTIONS)
    with pytest.raises(UnknownSettingError, match="simulate: unknown keyword 'max_active_key'"):
        simulate(small_mlp(), digits, max_active_key=2)
    with pytest.raises(UnknownSettingError, match="autoplace: unknown keyword 'max_active_key'"):
        autoplace(small_mlp(), digits, max_active_key=2, costs=CostModel())
    with pytest.raises(UnknownSettingError, match=r"did you mean 'max_bundle'"):
        RunConfig.setting("max_bundles")


def test_simulate_is_train_on_the_simulated_backend_bit_for_bit(digits) -> None:
    g = small_mlp()
    params = g.init_params(1, np.dtype("float32"))
    costs = CostModel(flops=1e9, bandwidth_bits_per_s=1e9, latency_s=1e-5)
    config = RunConfig(mode="amp", max_active_keys=3, min_update_frequency=2, epochs=2, seed=1, max_bundle=2,
                       optimizer={"name": "adam", "lr": 1e-3})  # fmt: skip
    a = simulate(g, digits, config, costs, params=params)
    b = train(g, digits, config, backend="simulated", costs=costs, params=params)
    c = runtime_simulate(g, digits, config.replace(backend="threads"), costs, params=params)  # whatever it says
    assert isinstance(b, TrainResult) and amp.simulate is simulate and runtime_simulate is simulate
    for other in (b, c):
        assert a.virtual and other.virtual and a.wall_s == other.wall_s > 0
        assert a.backend_stats == other.backend_stats
        assert [e.as_dict() for e in a.history] == [e.as_dict() for e in other.history]
        for node, group in a.params.items():
            for k, v in group.items():
                assert np.array_equal(v, other.params[node][k]), (node, k)
        ea, eb = a.trace.events(), other.trace.events()
        assert all(np.array_equal(ea[col], eb[col]) for col in ea)
    assert a.config == b.config == config.replace(backend="simulated")
    with pytest.raises(SettingError, match="placement 'auto' is chosen by train"):
        simulate(g, digits, placement="auto")


def test_the_summary_prints_every_setting(digits) -> None:
    r = train(small_mlp(), digits, mode="sync", max_active_keys=3, optimizer=SGD(0.05), validate=False)
    assert isinstance(r, TrainResult)
    s = r.summary(model="mlp")
    assert set(NAMES) <= set(s) and s["model"] == "mlp"
    assert s["max_active_keys"] == 1  # a sync run admits one key at a time
    assert s["optimizer"] == {"name": "sgd", "lr": 0.05, "clip_norm": None, "lr_decay": 1.0}
    assert s["placement"] == r.placement and s["placement_strategy"] == "round_robin"
    assert s["validate"] is False and s["backend"] == "threads"
    assert s["priority"] is None and s["priority_used"] == "light_first"  # 2 workers, the default


def test_command_line_options_come_from_the_declarations() -> None:
    parser = argparse.ArgumentParser(prog="amp-test", exit_on_error=False)
    add_setting_arguments(parser, defaults={"epochs": 3})
    assert RunConfig(**settings_from_args(parser.parse_args([]))) == RunConfig(epochs=3)
    args = parser.parse_args(
        ["--workers", "3", "--mode", "sync", "--max-bundle", "8", "--watchdog-s", "none", "--no-trace",
         "--placement", "balanced", "--optimizer", "adam", "--backend", "ray", "--address", "head:6379"]
    )  # fmt: skip
    config = RunConfig(**settings_from_args(args))
    assert (config.workers, config.mode, config.max_bundle, config.watchdog_s, config.trace) == (3, "sync", 8, None,
                                                                                                    False)  # fmt: skip
    assert (config.placement, config.optimizer, config.address) == ("balanced", "adam", "head:6379")
    help_text = parser.format_help()
    for s in SETTINGS:
        assert option(s.name) in help_text
    for bad in (["--workers", "0"], ["--mode", "fast"], ["--watchdog-s", "-1"], ["--optimizer", "adagrad"]):
        with pytest.raises(argparse.ArgumentError, match=bad[0]):
            parser.parse_args(bad)
