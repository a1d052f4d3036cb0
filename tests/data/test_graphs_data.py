"""Graph data: GraphInstance validation, graph_dataset, bAbI 15, random molecules and the QM9 xyz reader."""

from __future__ import annotations

from collections import Counter, deque
from pathlib import Path

import numpy as np
import pytest

from amp_notebook.data.graphs import (
    BABI15_EDGE_TYPES,
    BABI15_FEATURE_WIDTH,
    BABI15_TYPES,
    GraphInstance,
    babi15_graphs,
    graph_dataset,
)
from amp_notebook.data.molecules import ELEMENTS, molecule_graphs
from amp_notebook.data.qm9 import QM9_PROPERTIES, load_qm9_directory, load_qm9_xyz, qm9_graph


def small_graph(**changes: object) -> GraphInstance:
    fields: dict[str, object] = {
        "num_nodes": 3,
        "node_features": np.eye(3),
        "edges": np.array([[0, 1], [1, 2]], dtype=np.int64),
        "edge_types": np.array([0, 1], dtype=np.int64),
        "target": 1,
    }
    fields.update(changes)
    return GraphInstance(**fields)  # type: ignore[arg-type]


def connected(num_nodes: int, edges: np.ndarray) -> bool:
    neighbours: dict[int, set[int]] = {i: set() for i in range(num_nodes)}
    for s, d in edges.tolist():
        neighbours[s].add(d)
        neighbours[d].add(s)
    seen, queue = {0}, deque([0])
    while queue:
        for m in neighbours[queue.popleft()] - seen:
            seen.add(m)
            queue.append(m)
    return len(seen) == num_nodes


# ---------------------------------------------------------------------------------------------------------
# GraphInstance and graph_dataset


@pytest.mark.parametrize(
    ("changes", "task", "fragment"),
    [
        ({"num_nodes": 0, "node_features": np.zeros((0, 3)), "edges": np.zeros((0, 2), np.int64),
          "edge_types": np.zeros(0, np.int64)}, "classification", "empty graph"),
        ({"edges": np.array([[0, 1], [1, 3]])}, "classification", "edge 1 = [1, 3] has an endpoint out of range"),
        ({"edges": np.array([[-1, 1], [1, 2]])}, "classification", "edge 0 = [-1, 1] has an endpoint out of range"),
        ({"edge_types": np.array([0, 4])}, "classification", "edge 1 has unknown edge type 4"),
        ({"target": 5}, "classification", "label out of range: expected a class id in 0..4, found 5"),
        ({"target": -1}, "classification", "label out of range"),
        ({"target": 3}, "node_selection", "label out of range: expected a target node index in 0..2, found 3"),
        ({"target": float("nan")}, "regression", "finite float regression target"),
        ({"question": 7}, "node_selection", "question node index"),
        ({"node_features": np.eye(2)}, "classification", "node_features of shape (3, F)"),
        ({"edge_types": np.array([0])}, "classification", "one per edge"),
        ({"edges": np.array([0, 1, 2])}, "classification", "shape (E, 2)"),
    ],
)  # fmt: skip
def test_validation_errors_name_the_instance(changes: dict[str, object], task: str, fragment: str) -> None:
    good = [small_graph(target=0.5 if task == "regression" else 1) for _ in range(2)]
    bad = small_graph(**changes)
    with pytest.raises(ValueError) as info:
        graph_dataset([*good, bad], n_edge_types=4, task=task, num_classes=5)  # type: ignore[arg-type]
    assert "graph instance 2 (train)" in str(info.value)
    assert fragment in str(info.value)
    with pytest.raises(ValueError, match="graph instance 0 \\(val\\)"):
        graph_dataset(good, n_edge_types=4, task=task, val_instances=[bad], num_classes=5)  # type: ignore[arg-type]


def test_validate_directly() -> None:
    small_graph().validate(n_edge_types=2, task="classification", num_classes=2)
    with pytest.raises(ValueError, match=r"graph instance 9: edge 1 has unknown edge type 1: expected 0..0"):
        small_graph().validate(n_edge_types=1, task="classification", num_classes=2, index=9)


def test_graph_dataset_consistency_errors() -> None:
    with pytest.raises(ValueError, match="num_classes: required"):
        graph_dataset([small_graph()], n_edge_types=2)
    with pytest.raises(ValueError, match="task: expected one of"):
        graph_dataset([small_graph()], n_edge_types=2, task="ranking")  # type: ignore[arg-type]
    wide = small_graph(node_features=np.ones((3, 5)))
    with pytest.raises(ValueError, match=r"graph instance 1 \(train\): expected node_features width 3"):
        graph_dataset([small_graph(), wide], n_edge_types=2, num_classes=2)
    with pytest.raises(ValueError, match=r"graph instance 1 \(train\): expected no question node"):
        graph_dataset([small_graph(), small_graph(question=0)], n_edge_types=2, num_classes=2)


def test_graph_dataset_keys() -> None:
    graphs = [small_graph(target=t) for t in (0, 1, 1)]
    ds = graph_dataset(graphs[:2], n_edge_types=2, num_classes=2, val_instances=graphs[2:], name="toy")
    assert (ds.name, len(ds.train), len(ds.val), ds.num_classes) == ("toy", 2, 1, 2)
    assert ds.meta == {"n_edge_types": 2, "feature_width": 3, "task": "classification", "num_classes": 2}
    batch = ds.train[1]
    assert batch.size == 1 and batch.fields == {"n_nodes": 3, "n_edges": 2}
    assert set(batch.inputs) == {"node_features", "edges", "edge_types", "target"}
    assert batch.inputs["node_features"].dtype == np.float64
    assert batch.inputs["edges"].dtype == batch.inputs["edge_types"].dtype == np.int64
    assert batch.inputs["target"].tolist() == [1] and batch.inputs["target"].dtype == np.int64
    reg = graph_dataset([small_graph(target=2.5)], n_edge_types=2, task="regression")
    assert reg.num_classes is None and reg.train[0].inputs["target"].dtype == np.float64


# ---------------------------------------------------------------------------------------------------------
# bAbI 15


def test_babi15_answers_are_correct_and_unambiguous() -> None:
    for g in babi15_graphs(60, seed=2):
        names: list[str] = g.meta["node_names"]  # type: ignore[assignment]
        facts: list[tuple[str, str, str]] = g.meta["facts"]  # type: ignore[assignment]
        is_a = Counter(s for s, r, _ in facts if r == "is_a")
        fears = Counter(s for s, r, _ in facts if r == "afraid_of")
        individuals = [n for n in names if n not in BABI15_TYPES]
        types = [n for n in names if n in BABI15_TYPES]
        assert all(is_a[p] == 1 for p in individuals) and all(fears[t] == 1 for t in types)
        assert set(is_a) == set(individuals) and set(fears) == set(types)
        kind = {s: o for s, r, o in facts if r == "is_a"}
        fear = {s: o for s, r, o in facts if r == "afraid_of"}
        assert all(fear[t] != t for t in types)
        assert g.question is not None
        who = names[g.question]
        assert g.meta["question_text"] == f"What is {who} afraid of?"
        assert names[int(g.target)] == fear[kind[who]] == g.meta["answer"]


def test_babi15_edges_match_facts() -> None:
    g = babi15_graphs(1, seed=7)[0]
    names: list[str] = g.meta["node_names"]  # type: ignore[assignment]
    relation = {name: i for i, name in enumerate(BABI15_EDGE_TYPES)}
    found = Counter(
        (names[s], BABI15_EDGE_TYPES[t], names[d])
        for (s, d), t in zip(g.edges.tolist(), g.edge_types.tolist(), strict=True)
    )
    expected: Counter[tuple[str, str, str]] = Counter()
    for s, r, o in g.meta["facts"]:  # type: ignore[attr-defined]
        expected[(s, r, o)] += 1
        expected[(o, BABI15_EDGE_TYPES[relation[r] + 2], s)] += 1
    assert found == expected
    assert g.num_edges == 2 * len(g.meta["facts"])  # type: ignore[arg-type]


def test_babi15_node_annotations() -> None:
    g = babi15_graphs(1, seed=3)[0]
    names: list[str] = g.meta["node_names"]  # type: ignore[assignment]
    assert g.node_features.shape == (54, BABI15_FEATURE_WIDTH)
    assert np.flatnonzero(g.node_features[:, 0]).tolist() == [g.question]
    for i, name in enumerate(names):
        is_type = name in BABI15_TYPES
        assert g.node_features[i, 1:3].tolist() == ([0.0, 1.0] if is_type else [1.0, 0.0])
        one_hot = g.node_features[i, 3:]
        assert one_hot.sum() == is_type and (not is_type or one_hot[BABI15_TYPES.index(name)] == 1)


@pytest.mark.parametrize("size", [3, 8, 30, 54, 100])
def test_babi15_inflation(size: int) -> None:
    graphs = babi15_graphs(5, seed=1, inflate_to=size)
    assert all(g.num_nodes == size == len(g.meta["node_names"]) for g in graphs)  # type: ignore[arg-type]
    assert all(len(set(g.meta["node_names"])) == size for g in graphs)  # type: ignore[arg-type]
    for i, g in enumerate(graphs):
        g.validate(n_edge_types=4, task="node_selection", index=i)
    if size == 8:
        assert all(sum(n in BABI15_TYPES for n in g.meta["node_names"]) == 4 for g in graphs)  # type: ignore[attr-defined]


def test_babi15_determinism_targets_and_dataset() -> None:
    a, b, c = babi15_graphs(10, seed=5), babi15_graphs(10, seed=5), babi15_graphs(10, seed=6)
    assert [g.meta["facts"] for g in a] == [g.meta["facts"] for g in b] != [g.meta["facts"] for g in c]
    assert Counter(int(g.target) for g in babi15_graphs(200, seed=0)).most_common(1)[0][1] < 30  # answers spread out
    classes = babi15_graphs(10, seed=5, task="classification")
    assert [int(g.target) for g in classes] == [BABI15_TYPES.index(str(g.meta["answer"])) for g in a]
    ds = graph_dataset(a, n_edge_types=4, task="node_selection", val_instances=c)
    assert ds.meta["feature_width"] == BABI15_FEATURE_WIDTH
    assert ds.train[0].inputs["question"].tolist() == [a[0].question]
    assert ds.train[0].inputs["target"].tolist() == [a[0].target]
    cls = graph_dataset(classes, n_edge_types=4, num_classes=len(BABI15_TYPES))
    assert cls.num_classes == 20
    with pytest.raises(ValueError, match="inflate_to"):
        babi15_graphs(1, inflate_to=2)


# ---------------------------------------------------------------------------------------------------------
# Molecules

VALENCE = {"H": 1, "C": 4, "N": 3, "O": 2, "F": 1}


def test_molecules_respect_valence_and_are_connected() -> None:
    for g in molecule_graphs(300, seed=4):
        elements: list[str] = g.meta["elements"]  # type: ignore[assignment]
        assert np.array_equal(g.node_features, np.eye(len(ELEMENTS))[[ELEMENTS.index(e) for e in elements]])
        # Valence from the directed edge list (each bond appears once per direction).
        used = np.zeros(g.num_nodes, dtype=np.int64)
        np.add.at(used, g.edges[:, 0], g.edge_types + 1)
        assert used.tolist() == [VALENCE[e] for e in elements], g.meta["formula"]
        pairs = Counter(map(tuple, g.edges.tolist()))
        assert all(pairs[(d, s)] == 1 and c == 1 and s != d for (s, d), c in pairs.items())
        assert connected(g.num_nodes, g.edges)
        assert sum(e != "H" for e in elements) <= 9
        g.validate(n_edge_types=3, task="regression")


def reference_target(elements: list[str], bonds: list[tuple[int, int, int]]) -> float:
    atoms = {"H": 0.3, "C": 1.0, "N": 1.4, "O": 1.8, "F": 2.2}
    orders = {1: 0.5, 2: 1.1, 3: 1.9}
    heavy_neighbours = Counter()
    for i, j, _ in bonds:
        if "H" not in (elements[i], elements[j]):
            heavy_neighbours.update([i, j])
    rings = len(bonds) - len(elements) + 1
    d_max = max(heavy_neighbours.values(), default=0)
    return sum(atoms[e] for e in elements) + sum(orders[o] for *_, o in bonds) - 0.7 * rings + 0.1 * d_max**2


def test_molecule_targets_and_structure_variety() -> None:
    graphs = molecule_graphs(300, seed=8)
    for g in graphs:
        bonds: list[tuple[int, int, int]] = g.meta["bonds"]  # type: ignore[assignment]
        assert g.target == pytest.approx(reference_target(g.meta["elements"], bonds))  # type: ignore[arg-type]
        assert g.meta["rings"] == len(bonds) - g.num_nodes + 1 >= 0
    bond_types = Counter(int(t) for g in graphs for t in g.edge_types)
    assert bond_types[1] > 0 and bond_types[2] > 0, "double and triple bonds occur"
    assert Counter(g.meta["rings"] for g in graphs)[0] < len(graphs)
    assert all(ELEMENTS.index(e) >= 0 for g in graphs for e in g.meta["elements"])  # type: ignore[attr-defined]
    assert {e for g in graphs for e in g.meta["elements"]} == set(ELEMENTS)  # type: ignore[attr-defined]


def test_molecule_determinism_and_sizes() -> None:
    a, b = molecule_graphs(20, seed=1), molecule_graphs(20, seed=1)
    assert [g.meta["bonds"] for g in a] == [g.meta["bonds"] for g in b]
    assert [g.meta["bonds"] for g in a] != [g.meta["bonds"] for g in molecule_graphs(20, seed=2)]
    single = molecule_graphs(40, seed=0, max_heavy_atoms=1)
    assert {g.meta["formula"] for g in single} == {"CH4", "H3N", "H2O", "HF"}
    ds = graph_dataset(a, n_edge_types=3, task="regression")
    assert ds.train[0].inputs["target"].tolist() == [a[0].target]


# ---------------------------------------------------------------------------------------------------------
# QM9 xyz files (fixtures: our own geometries and property values)

PROPS = {
    # A B C mu alpha homo lumo gap r2 zpve U0 U H G Cv
    "methane": "157.70 157.70 157.70 0.*^0 13.2 -0.388 0.117 0.505 35.36 0.0447 -40.479 -40.476 -40.475 -40.499 6.47",
    "water": "799.6 437.9 282.9 2.16 6.31 -0.2928 0.0687 0.3615 19.0 0.0213 -76.404 -76.401 -76.400 -76.422 6.0",
    "ammonia": "2.94*^2 293.6 191.4 1.62 9.46 -0.2545 0.0815 0.336 26.16 0.0346 -56.526 -56.523 -56.522 -56.544 6.3",
}
ATOMS = {
    "methane": [
        ("C", 0.0, 0.0, 0.0, "-0.535689"),
        ("H", 0.629, 0.629, 0.629, "0.133921"),
        ("H", -0.629, -0.629, 0.629, "0.133922"),
        ("H", -0.629, 0.629, -0.629, "0.133923"),
        ("H", 0.629, -0.629, -0.629, "0.133923"),
    ],
    "water": [
        ("O", 0.0, 0.0, 0.1173, "-0.386"),
        ("H", 0.0, 0.7572, -0.4692, "0.193"),
        ("H", 0.0, -0.7572, -0.4692, "1.2*^-6"),
    ],
    "ammonia": [
        ("N", 0.0, 0.0, 0.1, "-0.4"),
        ("H", 0.9377, 0.0, -0.281, "0.13"),
        ("H", -0.4689, 0.8121, -0.281, "0.13"),
        ("H", -0.4689, -0.8121, -0.281, "0.14"),
    ],
}
TAILS = {
    "methane": ("1341.3 1341.3 1341.3 1562.5 1562.5 3038.0 3151.3 3151.3 3151.3", "C C", "InChI=1S/CH4/h1H4"),
    "water": ("1591.3 3710.9 3814.3", "O O", "InChI=1S/H2O/h1H2"),
    "ammonia": ("1021.2 1637.7 1637.7 3479.7 3597.2 3597.2", "N N", "InChI=1S/H3N/h1H3"),
}
GDB_IDS = {"methane": 1, "ammonia": 2, "water": 3}


def xyz_lines(name: str) -> list[str]:
    atoms = [f"{e}\t{x: .10f}\t{y: .10f}\t{z: .10f}\t{q}" for e, x, y, z, q in ATOMS[name]]
    freqs, smiles, inchi = TAILS[name]
    props = "\t".join(PROPS[name].split())
    return [str(len(atoms)), f"gdb {GDB_IDS[name]}\t{props}\t", *atoms, freqs.replace(" ", "\t"),
            smiles.replace(" ", "\t"), f"{inchi}\t{inchi}"]  # fmt: skip


def write_xyz(directory: Path, name: str, lines: list[str] | None = None) -> Path:
    path = directory / f"dsgdb9nsd_{GDB_IDS[name]:06d}.xyz"
    path.write_text("\n".join(xyz_lines(name) if lines is None else lines) + "\n", encoding="utf-8")
    return path


def test_qm9_reader_on_fixtures(tmp_path: Path) -> None:
    water = load_qm9_xyz(write_xyz(tmp_path, "water"))
    assert water.gdb_id == 3 and water.elements == ["O", "H", "H"]
    assert water.coordinates.shape == (3, 3) and water.coordinates[1].tolist() == [0.0, 0.7572, -0.4692]
    assert water.charges[2] == pytest.approx(1.2e-6)  # Mathematica's 1.2*^-6
    assert list(water.properties) == list(QM9_PROPERTIES)
    assert water.properties["U0"] == -76.404 and water.properties["Cv"] == 6.0
    assert water.smiles == ("O", "O") and water.inchi == ("InChI=1S/H2O/h1H2",) * 2
    assert water.frequencies.tolist() == [1591.3, 3710.9, 3814.3]
    assert water.bonds() == [(0, 1), (0, 2)]  # two O-H bonds, no H-H bond

    methane = load_qm9_xyz(write_xyz(tmp_path, "methane"))
    assert len(methane.elements) == 5 and methane.properties["mu"] == 0.0
    assert methane.bonds() == [(0, 1), (0, 2), (0, 3), (0, 4)]
    ammonia = load_qm9_xyz(write_xyz(tmp_path, "ammonia"))
    assert ammonia.properties["A"] == 294.0  # 2.94*^2
    assert ammonia.bonds() == [(0, 1), (0, 2), (0, 3)]


def test_qm9_graphs_and_directory(tmp_path: Path) -> None:
    for name in ATOMS:
        write_xyz(tmp_path, name)
    (tmp_path / "notes.txt").write_text("not a molecule", encoding="utf-8")
    graphs = load_qm9_directory(tmp_path)
    assert [g.meta["gdb_id"] for g in graphs] == [1, 2, 3]  # file name order
    assert [g.target for g in graphs] == [-40.479, -56.526, -76.404]
    water = graphs[2]
    assert water.num_nodes == 3 and water.meta["formula"] == "H2O"
    assert sorted(map(tuple, water.edges.tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0)]
    assert water.edge_types.tolist() == [0, 0, 0, 0]
    assert water.node_features.tolist() == [[0, 0, 0, 1, 0], [1, 0, 0, 0, 0], [1, 0, 0, 0, 0]]
    assert [g.target for g in load_qm9_directory(tmp_path, target="gap", limit=2)] == [0.505, 0.336]
    ds = graph_dataset(graphs, n_edge_types=1, task="regression")
    assert ds.train[2].fields == {"n_nodes": 3, "n_edges": 4}
    with pytest.raises(ValueError, match="target 'energy'"):
        qm9_graph(load_qm9_xyz(tmp_path / "dsgdb9nsd_000003.xyz"), target="energy")
    with pytest.raises(ValueError, match="expected one of the QM9 properties"):
        load_qm9_directory(tmp_path, target="energy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="found none"):
        load_qm9_directory(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_qm9_directory(tmp_path / "missing")


def _edit(name: str, line: int, text: str | None) -> list[str]:
    """The fixture's lines with line `line` (1-based) replaced, or removed when `text` is None."""
    lines = xyz_lines(name)
    if text is None:
        del lines[line - 1]
    else:
        lines[line - 1] = text
    return lines


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (_edit("water", 1, "4"), 6, "wrong atom count: line 1 declares 4 atoms but only 3 atom lines"),
        (_edit("water", 1, "2"), 5, "wrong atom count: line 1 declares 2 atoms but this line is another atom"),
        (_edit("water", 1, "three"), 1, "wrong atom count: expected a positive integer, found 'three'"),
        (_edit("water", 4, "H\t0.0\tabc\t-0.4692\t0.193"), 4, "malformed coordinate line for atom 2 of 3"),
        (_edit("water", 4, "H\t0.0\t0.7572\t-0.4692"), 4, "expected 5 fields"),
        (_edit("water", 3, "Cl\t0.0\t0.0\t0.1173\t-0.386"), 3, "unknown element 'Cl'"),
        (_edit("water", 2, "gdb 3\t" + "\t".join(PROPS["water"].split()[:13])), 2, "missing property"),
        (_edit("water", 2, "gdb 3\t" + "\t".join(PROPS["water"].split()[:13])), 2, "(missing G, Cv)"),
        (_edit("water", 2, "gdb 3\t" + PROPS["water"].replace("-76.404", "n/a")), 2, "property U0"),
        (_edit("water", 8, None), 8, "expected the InChI line, found end of file"),
        (_edit("water", 6, "1591.3\tx\t3814.3"), 6, "expected the harmonic frequencies"),
    ],
)
def test_qm9_errors_name_file_and_line(tmp_path: Path, lines: list[str], line: int, fragment: str) -> None:
    path = write_xyz(tmp_path, "water", lines)
    with pytest.raises(ValueError) as info:
        load_qm9_xyz(path)
    assert f"{path}, line {line}:" in str(info.value)
    assert fragment in str(info.value)
