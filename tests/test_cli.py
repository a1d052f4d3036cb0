"""The command line: JSON contracts of train, demo and bench (figures are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amp_notebook.cli import main

TRAIN_KEYS = {
    "model", "mode", "workers", "max_active_keys", "min_update_frequency", "replicas", "epochs", "wall_s",
    "train_instances_per_s", "val_accuracy", "staleness", "utilization",
}  # fmt: skip


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_train_mlp_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    # plain SGD keeps this contract check quick (Adam, the default, updates 784 x 784 matrices 60 times an epoch)
    argv = ["train", "--model", "mlp", "--epochs", "2", "--workers", "2", "--optimizer", "sgd", "--json", "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = last_json_line(captured.out)
    assert out.keys() >= TRAIN_KEYS
    assert out["model"] == "mlp" and out["workers"] == 2 and out["epochs"] == 2
    assert len(out["val_accuracy"]) == 2 and all(0.0 <= a <= 1.0 for a in out["val_accuracy"])
    assert set(out["staleness"]) == {"mean", "p95", "max"}
    assert len(out["utilization"]) == 2 and all(0.0 <= u <= 1.0 for u in out["utilization"])
    assert out["train_instances_per_s"] > 0
    if out["engine_used"] == "native":  # the worker loops' own count, and its line in the text summary
        assert [t["worker"] for t in out["worker_time"]] == [0, 1]
        assert all(t["loop_s"] >= t["ops_s"] > 0 for t in out["worker_time"])
        assert "  worker time          w0 ops " in captured.err and "no core" in captured.err
    else:
        assert out["worker_time"] is None


def test_train_rnn_replicas_sync_with_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    args = ["train", "--model", "rnn", "--replicas", "2", "--mode", "sync", "--epochs", "1", "--n-train", "600",
            "--n-val", "200", "--trace", str(trace), "--json", "--quiet"]  # fmt: skip
    assert main(args) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["replicas"] == 2 and out["mode"] == "sync" and out["max_active_keys"] == 1
    assert out["staleness"] == {"mean": 0.0, "p95": 0.0, "max": 0.0}
    doc = json.loads(trace.read_text())
    assert any(e["ph"] == "X" for e in doc["traceEvents"])


@pytest.mark.slow
def test_console_entry_point_runs_as_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "amp_notebook", "train", "--model", "mlp", "--epochs", "1", "--mode", "pipeline",
         "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = last_json_line(proc.stdout)
    assert out["mode"] == "pipeline"
    assert "key/s" in proc.stderr or "key" in proc.stderr  # the progress bar went to stderr


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--model", "mlp", "--workers", "0"])
    assert "--workers: workers: expected an int >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "no-such-benchmark"])
    capsys.readouterr()
    refused = {
        "--replicas applies to --model rnn only": ["--model", "mlp", "--replicas", "2"],
        "--per-key applies to the ggsnn models, tree-lstm and bilstm-tagger only": ["--model", "mlp", "--per-key", "4"],
        "--conll applies to --model bilstm-tagger only": ["--model", "rnn", "--conll", "x.conll"],
        "--address needs --backend ray": ["--model", "mlp", "--address", "127.0.0.1:6379"],
    }
    for message, argv in refused.items():  # one line naming the problem, exit status 2, no traceback
        assert main(["train", *argv, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == f"amp-notebook train: {message}\n"


@pytest.mark.parametrize(
    ("model", "extra"),
    [("tree-lstm", ["--n-train", "60", "--n-val", "20"]), ("ggsnn", ["--n-train", "40", "--n-val", "20"])],
)
def test_train_several_instances_per_key(model: str, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", model, "--per-key", "5", "--epochs", "1", "--json", "--quiet", *extra]
    assert main(argv) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["train_instances"] == int(extra[1])  # instances, not keys
    assert 0.0 <= out["val_accuracy"][-1] <= 1.0
    if model == "tree-lstm":
        assert out["per_key"] == 5 and 0.0 <= out["val_root_accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("overhead", {"us_per_message", "us_per_message_native"}),
        ("scaling", {"native", "python", "ratios", "workers", "ceiling", "of_ceiling", "waits", "bound"}),
        ("speedup", {"amp_per_s", "sync_per_s", "ratio", "auto_ratio", "engine", "python_ratio"}),
        ("trace-overhead", {"ratio"}),
        ("rnn-vs-torch", {"ours", "ours_python", "torch", "throughput_ratio", "engine_gain"}),
        (
            "tree-vs-torch",
            {
                "ours",
                "ours_per_tree",
                "torch_eager",
                "torch_batched",
                "ratio_vs_eager",
                "ratio_vs_batched",
                "ratio_per_tree_vs_eager",
                "ratio_per_tree_unbundled_vs_eager",
                "ratio_per_tree_vs_batched",
                "engine_gain_per_tree",
            },
        ),
        (
            "ggsnn-vs-torch",
            {
                "ours",
                "ours_per_graph",
                "torch_dense",
                "torch_scatter",
                "ratio_vs_dense",
                "ratio_vs_scatter",
                "ratio_per_graph_vs_dense",
                "ratio_per_graph_vs_scatter",
                "engine_gain_per_graph",
            },
        ),
        ("bundling", {"tree", "ggsnn", "tree_messages_per_s", "ggsnn_messages_per_s"}),
        ("message-cost", {"tree", "tree_bundled", "ggsnn", "ggsnn_bundled"}),
        (
            "tagger-vs-torch",
            {
                "ours_mak32",
                "ours_mak1",
                "ours_mak32_bundled",
                "torch_eager",
                "torch_batched",
                "speedup_mak32_vs_mak1",
                "ratio_vs_eager",
                "ratio_vs_batched",
                "engine_gain",
            },
        ),
    ],
)
@pytest.mark.slow
def test_bench_quick_json_contract(name: str, keys: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", name, "--quick", "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["benchmark"] == name
    assert keys <= out.keys()
    if name == "rnn-vs-torch":
        for side in ("ours", "torch"):
            assert {"instances_per_s", "time_to_target_s", "epochs_to_target", "final_val_accuracy"} <= out[side].keys()
            assert out[side]["instances_per_s"] > 0
    sides = {"tree-vs-torch": ("ours", "ours_per_tree", "ours_per_tree_python", "torch_eager", "torch_batched"),
             "ggsnn-vs-torch": ("ours", "ours_per_graph", "ours_per_graph_python", "torch_dense", "torch_scatter"),
             "tagger-vs-torch": ("ours_mak32", "ours_mak1", "ours_mak32_bundled", "ours_mak32_python", "torch_eager",
                                 "torch_batched")}.get(name, ())  # fmt: skip
    if name == "bundling":  # every setting handled messages, bundles of at least one message each
        for model in ("tree", "ggsnn"):
            assert all(v > 0 for v in out[f"{model}_messages_per_s"].values())
    for side in sides:
        assert {"instances_per_s", "final_metric", "settings"} <= out[side].keys()
        assert out[side]["instances_per_s"] > 0 and 0.0 <= out[side]["final_metric"] <= 1.0


def test_train_bilstm_tagger_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "bilstm-tagger", "--n-train", "16", "--n-val", "4", "--epochs", "1", "--json",
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out.keys() >= TRAIN_KEYS and out["model"] == "bilstm-tagger" and out["train_instances"] == 16
    assert 0.0 <= out["val_accuracy"][0] <= 1.0  # token accuracy
    assert 0.5 < out["val_majority_fraction"] < 1.0 and 0.0 < out["rare_token_fraction"] < 1.0
    assert out["frequent_threshold"] == 5 and out["per_key"] == 1


def test_train_bilstm_tagger_on_a_conll_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.conll"
    path.write_text("".join(f"the O\ncity O\nof O\nOslo{i % 2} B-LOC\n\n" for i in range(24)), encoding="utf-8")
    argv = ["train", "--model", "bilstm-tagger", "--conll", str(path), "--per-key", "4", "--epochs", "1", "--json",
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["train_instances"] == 22 and out["per_key"] == 4  # 10% of 24 sentences held out for validation


def test_train_mlp_on_mnist_idx_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.data.test_mnist_idx import write_mnist

    write_mnist(tmp_path, n_train=300, n_test=100, gz=True)
    args = ["train", "--model", "mlp", "--mnist", str(tmp_path), "--epochs", "1", "--json", "--quiet"]
    assert main(args) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["train_instances"] == 300 and len(out["val_accuracy"]) == 1


def test_train_mlp_mnist_missing_files_names_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--model", "mlp", "--mnist", str(tmp_path), "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "train-images-idx3-ubyte" in err and "Traceback" not in err and len(err.splitlines()) == 1
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):  # --debug: the error itself
        main(["train", "--model", "mlp", "--mnist", str(tmp_path), "--epochs", "1", "--quiet", "--debug"])


def test_demo_runs_one_copy_of_the_step_on_each_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "demo.trace.json"
    assert main(["demo", "--epochs", "1", "--json", "--trace", str(trace)]) == 0
    captured = capsys.readouterr()
    out = last_json_line(captured.out)
    assert out["model"] == "rnn" and out["replicas"] == 2 and out["workers"] == 2 and out["mode"] == "amp"
    assert len(out["val_accuracy"]) == 1
    # one copy of the step on each worker (a single copy leaves the other worker nearly idle)
    assert {out["placement"]["step0"], out["placement"]["step1"]} == {0, 1}
    assert len(out["utilization"]) == 2 and all(u > 0.0 for u in out["utilization"])
    assert trace.exists() and json.loads(trace.read_text())
    assert "replicated 2x" in captured.err and "demo finished" in captured.err
