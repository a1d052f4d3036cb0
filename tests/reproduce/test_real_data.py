"""Real data with ``--data``: each format read from small fixture files written here, by the loader, by
``amp-notebook train --data DIR`` and by ``reproduce``'s workloads (each model from its folder of the root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_notebook.cli import main
from amp_notebook.cli_data import REAL_DATA
from amp_notebook.data.real import FOLDERS, DataDirError, check_root, load_data_dir
from amp_notebook.reproduce.workloads import available
from tests.data.test_graphs_data import GDB_IDS, write_xyz
from tests.data.test_mnist_idx import write_mnist

SST_TREES = (
    "(3 (2 the) (3 (3 good) (2 film)))",
    "(1 (2 a) (1 (1 dull) (2 plot)))",
    "(4 (2 the) (4 (4 superb) (2 cast)))",
    "(0 (2 this) (0 (0 awful) (2 movie)))",
    "(2 (2 the) (2 film))",
)
CONLL_SENTENCE = "Anna B-PER\nlives O\nin O\nOslo B-LOC\n\n"


def write_sst(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.txt").write_text("\n".join(SST_TREES * 4) + "\n", encoding="utf-8")
    (directory / "dev.txt").write_text("\n".join(SST_TREES[:3]) + "\n", encoding="utf-8")
    return directory


def write_qm9(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in GDB_IDS:
        write_xyz(directory, name)
    return directory


def write_conll(directory: Path, dev: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.txt").write_text(CONLL_SENTENCE * 20 + "Bo B-PER\nrests O\n\n", encoding="utf-8")
    if dev:
        (directory / "dev.conll").write_text(CONLL_SENTENCE * 3, encoding="utf-8")
    return directory


def write_mnist_dir(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_mnist(directory, n_train=120, n_test=40, gz=True)
    return directory


WRITERS = {"mlp": write_mnist_dir, "tree-lstm": write_sst, "ggsnn": write_qm9, "bilstm-tagger": write_conll}
# model -> (training instances, validation instances) the fixtures hold
COUNTS = {"mlp": (120, 40), "tree-lstm": (20, 3), "ggsnn": (2, 1), "bilstm-tagger": (21, 3)}


@pytest.mark.parametrize("model", sorted(WRITERS))
def test_each_format_is_read_and_named(tmp_path: Path, model: str) -> None:
    directory = WRITERS[model](tmp_path / "d")
    data = load_data_dir(model, directory, seed=0)
    assert (data.train_instances, data.val_instances) == COUNTS[model]
    source = str(data.meta["source"])
    assert str(directory) in source and f"{COUNTS[model][0]:,} training" in source


def test_qm9_targets_the_dipole_moment_and_holds_out_a_tenth(tmp_path: Path) -> None:
    data = load_data_dir("ggsnn", write_qm9(tmp_path), seed=0)
    dipoles = {0.0, 2.16, 1.62}  # methane, water, ammonia (the fixtures' mu column)
    targets = {round(float(b.inputs["target"].reshape(-1)[0]), 2) for b in data.train + data.val}
    assert targets == dipoles and data.meta["n_edge_types"] == 1 and data.meta["task"] == "regression"


def test_a_tagger_without_dev_file_holds_out_sentences(tmp_path: Path) -> None:
    data = load_data_dir("bilstm-tagger", write_conll(tmp_path, dev=False), seed=0)
    assert data.train_instances + data.val_instances == 21 and data.val_instances == 2


def test_limit_caps_each_split(tmp_path: Path) -> None:
    data = load_data_dir("tree-lstm", write_sst(tmp_path), limit=2)
    assert (data.train_instances, data.val_instances) == (2, 2) and "at most 2" in str(data.meta["source"])


@pytest.mark.parametrize(
    ("model", "make", "fragment"),
    [
        ("rnn", True, "the list-reduction RNN reads no files"),
        ("tree-lstm", False, "no such directory"),
        ("tree-lstm", True, "expected train.txt there"),
        ("bilstm-tagger", True, "expected train.txt or train.conll"),
        ("mlp", True, "train-images-idx3-ubyte"),
        ("ggsnn", True, "expected QM9 .xyz files"),
        ("lstm", True, "no real data set is known for model 'lstm'"),
    ],
)
def test_errors_name_what_is_missing(tmp_path: Path, model: str, make: bool, fragment: str) -> None:
    directory = tmp_path / "empty"
    if make:
        directory.mkdir()
    with pytest.raises(DataDirError, match=fragment):
        load_data_dir(model, directory)


@pytest.mark.parametrize("model", sorted(WRITERS))
def test_train_reads_data_dir(tmp_path: Path, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    directory = WRITERS[model](tmp_path / "d")
    zoo_model = next(name for name, data_set in REAL_DATA.items() if data_set == model)
    argv = ["train", "--model", zoo_model, "--data", str(directory), "--epochs", "1", "--json", "--quiet",
            "--workers", "1", "--max-active-keys", "2"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["train_instances"] == COUNTS[model][0] and str(directory) in out["data"]
    if model == "ggsnn":
        assert out["task"] == "regression"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--model", "mlp", "--mnist", "."], "give --data or --mnist, not both"),
        (["--model", "ggsnn"], "no real data set is known for --model ggsnn; models that read one: "),
        (["--model", "rnn"], "no real data set is known for --model rnn"),
        (["--model", "tree-lstm", "--per-key", "2"], "--per-key applies to --model bilstm-tagger only"),
    ],
)
def test_train_refuses_data_it_cannot_use(
    tmp_path: Path, argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--data", str(tmp_path), "--quiet", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_reproduce_workloads_read_their_folders_of_the_root(tmp_path: Path) -> None:
    write_sst(tmp_path / FOLDERS["tree-lstm"])
    write_mnist_dir(tmp_path / FOLDERS["mlp"])
    check_root(tmp_path)
    notes: dict[str, str] = {}
    loaded = {w.name: w for w in available(("mlp", "tree-lstm", "ggsnn"), True, 0, notes, data_root=tmp_path)}
    assert str(tmp_path / "sst") in loaded["tree-lstm"].data_source and loaded["tree-lstm"].data.name == "sst"
    assert str(tmp_path / "mnist") in loaded["mlp"].data_source
    assert loaded["ggsnn"].data_source.startswith("generated")  # no qm9/ folder: generated molecules
    assert loaded["tree-lstm"].target is not None and loaded["tree-lstm"].target.value == 0.82  # the paper's


def test_a_root_with_no_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="expected at least one of the folders mnist/"):
        check_root(tmp_path)
