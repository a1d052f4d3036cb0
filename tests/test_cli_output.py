"""The command line as a user reads it: where the summary goes, what it says, errors, progress and help."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from amp_notebook import cli, cli_train
from amp_notebook.cli import build_parser, main

TINY_TREES = ["train", "--model", "tree_lstm", "--n-train", "60", "--n-val", "20", "--epochs", "1"]


def test_the_text_summary_goes_to_stdout_with_per_node_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY_TREES, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("model tree-lstm (amp, 2 workers")  # `> out.txt` keeps it
    # the Tree-LSTM's own per-node frequencies, not the run's 1
    assert "min_update_frequency per node: 50 (" in captured.out and "1000 (embed)" in captured.out
    assert re.search(r"val root accuracy +[01]\.\d{3}", captured.out)
    assert "epoch 1:" in captured.err and "model tree-lstm" not in captured.err
    assert "  trace " not in captured.out  # no trace file was asked for


def test_json_leaves_stdout_to_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY_TREES, "--quiet", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and "model tree-lstm (amp" in err  # the text summary went to stderr
    summary = json.loads(out)
    assert summary["node_min_update_frequency"]["embed"] == 1000 and 0.0 <= summary["val_root_accuracy"] <= 1.0
    assert summary["model"] == "tree-lstm" and "trace_file" not in summary


def test_update_frequencies_text() -> None:
    assert cli_train.update_frequencies_text({"a": 1, "b": 1}) == "1"
    text = cli_train.update_frequencies_text({"e": 1000, "a": 50, "b": 50, "c": 50, "d": 50})
    assert text == "per node: 50 (4 nodes), 1000 (e)"


def test_progress_ends_where_the_run_ends(capsys: pytest.CaptureFixture[str]) -> None:
    # the target is met after the first of 3 epochs: the bar ends full at the keys that ran, not at a third
    assert main([*TINY_TREES[:-1], "3", "--target", "0.0", "--json"]) == 0
    err = capsys.readouterr().err
    renders = re.findall(r"(\d+)%\|[^|]*\| (\d+)/(\d+)", err)
    percent, done, total = renders[-1]
    assert (percent, done, total) == ("100", "80", "80")  # 60 + 20 instances, one per key, one epoch


def test_a_bug_exits_1_with_one_line_and_debug_shows_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: argparse.Namespace) -> None:
        raise KeyError("not bad input")

    monkeypatch.setattr(cli_train, "model_and_data", broken)
    assert main([*TINY_TREES, "--quiet"]) == cli.BUG
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "this is a bug" in err and "--debug" in err
    with pytest.raises(KeyError):
        main([*TINY_TREES, "--quiet", "--debug"])
    with pytest.raises(KeyError):
        main(["--debug", *TINY_TREES, "--quiet"])


def all_actions(parser: argparse.ArgumentParser, path: str = "amp-notebook") -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += all_actions(sub, f"{path} {name}")
        else:
            found.append((path, action))
    return found


def test_every_option_of_every_command_has_help() -> None:
    actions = all_actions(build_parser())
    assert len(actions) > 60  # every command's options were filled in
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, a in actions if not (a.help or "").strip()]
    assert missing == []
    for path, action in actions:  # a help that argparse cannot expand fails at --help time; expand each here
        formatter = argparse.HelpFormatter(path)
        formatter._expand_help(action)


def test_every_command_is_filled_in_lazily_and_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0
        assert f"usage: amp-notebook {name}" in capsys.readouterr().out


def test_train_offers_every_run_setting_from_its_declaration() -> None:
    from amp_notebook.runtime.config import RunConfig
    from amp_notebook.runtime.config_cli import option

    (subparsers,) = [a for a in build_parser(["train"])._actions if isinstance(a, argparse._SubParsersAction)]
    train = subparsers.choices["train"]
    for setting in RunConfig.settings():
        if setting.name in cli_train.NOT_OPTIONS:
            continue
        action = train._option_string_actions[option(setting.name)]
        assert setting.doc in (action.help or ""), setting.name
    assert set(cli_train.NOT_OPTIONS) <= {s.name for s in RunConfig.settings()}  # no stale entry


def test_settings_come_from_the_zoo_unless_given_and_an_explicit_none_stays() -> None:
    from amp_notebook.models import zoo

    parser = argparse.ArgumentParser()
    cli_train.add_train_arguments(parser)
    rnn = cli_train.settings_for(parser.parse_args(["--model", "rnn"]))
    assert rnn["min_update_frequency"] == zoo.get("rnn").settings.min_update_frequency
    assert rnn["optimizer"] == dict(zoo.get("rnn").settings.optimizer)
    argv = ["--model", "mlp", "--watchdog-s", "none", "--optimizer", "sgd", "--lr", "0.1", "--epochs", "7"]
    mlp = cli_train.settings_for(parser.parse_args(argv))
    assert mlp["watchdog_s"] is None and mlp["epochs"] == 7
    assert mlp["optimizer"] == {**zoo.get("mlp").settings.optimizer, "name": "sgd", "lr": 0.1}
    assert all(mlp.get(name) is not None for name in cli_train.recommended_anywhere() if name in mlp)
