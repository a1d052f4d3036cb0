"""``amp-notebook validate``: every problem printed, exit 0 valid / 2 invalid, never a traceback."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import amp_notebook as amp
from amp_notebook.cli import main
from amp_notebook.ir.ops import OPS
from amp_notebook.ir.serialize import graph_to_dict


class _Runs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """One file per kind of input: valid, each kind of invalid, and things that are not graphs at all."""
    out: dict[str, Path] = {}

    def write(name: str, content: str | bytes) -> None:
        out[name] = tmp_path / name
        if isinstance(content, bytes):
            out[name].write_bytes(content)
        else:
            out[name].write_text(content)

    amp.save_graph(amp.models.rnn(hidden=4, embedding_dim=3), tmp_path / "rnn.json")
    out["rnn.json"] = tmp_path / "rnn.json"
    schema_bad = graph_to_dict(amp.models.mlp(hidden=4))
    schema_bad["nodes"][1]["config"]["in_features"] = "64"
    schema_bad["nodes"][2]["kind"] = "relux"
    schema_bad["edges"].append(["x"])
    write("schema.json", json.dumps(schema_bad))
    build_bad = graph_to_dict(amp.models.mlp(hidden=4))
    build_bad["edges"].append(["linear1", "out", "ghost", "in"])
    write("build.json", json.dumps(build_bad))
    untrainable = amp.models.mlp(hidden=4)
    untrainable.remove_node("loss")
    amp.save_graph(untrainable, tmp_path / "untrainable.json")
    out["untrainable.json"] = tmp_path / "untrainable.json"
    write("code.json", json.dumps(_with_predicate(f"__import__('os').system('touch {tmp_path / 'pwned'}')")))
    write("notjson.json", '{"schema": "amp_notebook.graph",')
    write("binary.bin", bytes(range(256)) * 4)
    write("pickle.pkl", pickle.dumps(_Runs(tmp_path / "pwned")))
    write("empty.json", "")
    out["missing.json"] = tmp_path / "missing.json"
    out["directory"] = tmp_path
    return out


def _with_predicate(predicate: str) -> dict[str, Any]:
    data = graph_to_dict(amp.models.rnn(hidden=4, embedding_dim=3))
    next(n for n in data["nodes"] if n["kind"] == "cond")["config"]["predicate"] = predicate
    return data


def run_validate(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", *args])
    return code, capsys.readouterr().out


def test_a_valid_graph_exits_0(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_validate(str(files["rnn.json"]), capsys=capsys)
    assert code == 0 and out.strip().endswith("rnn.json: valid graph (14 nodes, 14 edges)")


@pytest.mark.parametrize(
    ("name", "step", "fragments"),
    [
        ("schema.json", "does not fit the graph schema",
         ["config.in_features: expected an integer", "found the string '64'; write the number without quotes",
          f"kind: expected one of the {len(OPS)} names", "did you mean 'relu'?",
          "edges[9]: expected at least 4 items"]),
        ("build.json", "ops or edges cannot be built", ["edges[9]: connect linear1:out -> ghost:in: there is no node"]),
        ("untrainable.json", "not a trainable graph",
         ["output 'out' is not connected", "the graph has no loss"]),
        ("code.json", "ops or edges cannot be built", ["only calls of ['abs', 'max', 'min'] are allowed"]),
        ("notjson.json", "not graph JSON", ["not valid JSON: line 1 column 33: Expecting property name"]),
        ("binary.bin", "not graph JSON", ["expected UTF-8 JSON text, found a byte 0x80 at offset 128"]),
        ("pickle.pkl", "not graph JSON", ["this is a Python pickle, not JSON; amp_notebook never unpickles"]),
        ("empty.json", "not graph JSON", ["found an empty file"]),
        ("missing.json", "cannot be read", ["no such file; check the path"]),
        ("directory", "cannot be read", ["cannot read it"]),
    ],
)  # fmt: skip
def test_invalid_input_prints_every_problem_and_exits_2(
    name: str, step: str, fragments: list[str], files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_validate(str(files[name]), capsys=capsys)
    assert code == 2
    assert f"{files[name]}: invalid ({step})" in out
    for fragment in fragments:
        assert fragment in out
    assert not (files["directory"] / "pwned").exists(), "validating a file ran code from it"


def test_schema_problems_are_all_listed(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(files["schema.json"]), "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)  # stdout is the JSON object alone; the text went to stderr
    assert code == 2 and not report["valid"]
    (entry,) = report["files"]
    assert entry["step"] == "schema" and len(entry["problems"]) == 3
    assert "3 problems:" in err


def test_several_files_and_json_output(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_validate(str(files["rnn.json"]), str(files["untrainable.json"]), "--json", capsys=capsys)
    report = json.loads(out.strip().splitlines()[-1])
    assert code == 2 and report["valid"] is False
    assert [f["valid"] for f in report["files"]] == [True, False]
    assert report["files"][0] == {"path": str(files["rnn.json"]), "valid": True, "step": None, "problems": [],
                                  "nodes": 14, "edges": 14}  # fmt: skip
    code, _ = run_validate(str(files["untrainable.json"]), "--inference", capsys=capsys)
    assert code == 2  # still an unconnected output; only the loss is forgiven
    inference = amp.models.mlp(hidden=4)
    inference.remove_node("loss")
    inference.remove_node("target")
    inference.discard(amp.Ref("linear4"))
    amp.save_graph(inference, files["directory"] / "inference.json")
    code, out = run_validate(str(files["directory"] / "inference.json"), "--inference", capsys=capsys)
    assert code == 0, out


@pytest.mark.slow
def test_no_traceback_from_the_real_command(files: dict[str, Path]) -> None:
    """The installed entry point, as a user runs it, on the worst inputs at once."""
    names = ["pickle.pkl", "binary.bin", "missing.json", "code.json", "schema.json", "directory"]
    result = subprocess.run(
        [sys.executable, "-m", "amp_notebook", "validate", *(str(files[n]) for n in names)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(amp.__file__).parents[1])},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.count(": invalid (") == len(names)
    assert not (files["directory"] / "pwned").exists()
