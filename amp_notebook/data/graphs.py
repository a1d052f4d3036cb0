"""Graph instances for the gated graph sequence network (GGS-NN) experiments: bAbI 15, molecules, QM9.

Data
----
A `GraphInstance` is one graph: `num_nodes` nodes with float64 annotations `node_features` (n, F), directed
edges `edges` (E, 2) int64 as (source, destination) with an `edge_types` (E,) int64 in 0..n_edge_types-1, a
`target` (a class id, a node index for node selection, or a float for regression), an optional `question`
node and free-form `meta`. `graph_dataset` turns instances into a `Dataset` of one key per graph.

Three sources, all built here without downloads:

- `babi15_graphs`: bAbI task 15 (basic deduction). Individuals ("Gertrude") and animal types ("mouse") are
  nodes; facts "X is a T" and "T are afraid of U" are edges of types 0 (`is_a`) and 1 (`afraid_of`), each
  with its reverse edge (types 2 and 3). The question "What is X afraid of?" marks X; the answer is the node
  U that X's type fears. Distractor individuals and types inflate each graph to `inflate_to` nodes (the
  AMPNet paper inflates to ~54 nodes).
- `molecule_graphs`: random connected molecules with H, C, N, O, F whose bond orders (single, double,
  triple; edge types 0, 1, 2) add up exactly to each atom's valence, with a regression target computed from
  the structure (formula in `molecule_target`).
- `load_qm9_xyz` / `load_qm9_directory`: QM9's published xyz files (format in `load_qm9_xyz`), with bonds
  inferred from interatomic distances and a chosen property (default U0) as regression target.

Undirected bonds appear as two directed edges (i -> j and j -> i) of the same type; bAbI's directed facts use
separate reverse types instead, as in Li et al. (2016).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from amp_notebook.data.batch import Batch, Dataset

Task = Literal["classification", "regression", "node_selection"]
TASKS: tuple[str, ...] = ("classification", "regression", "node_selection")

# ---------------------------------------------------------------------------------------------------------
# Graph instances and datasets


@dataclass(frozen=True)
class GraphInstance:
    """One graph: node annotations (n, F), directed typed edges (E, 2) / (E,), a target, an optional question."""

    num_nodes: int
    node_features: np.ndarray
    edges: np.ndarray
    edge_types: np.ndarray
    target: float | int
    question: int | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def feature_width(self) -> int:
        return int(self.node_features.shape[1])

    def validate(
        self,
        n_edge_types: int,
        task: str = "regression",
        num_classes: int | None = None,
        index: int | None = None,
        split: str | None = None,
    ) -> None:
        """Raise `ValueError` (naming the instance `index`) unless shapes, edges and target are consistent."""
        where = "graph instance" + (f" {index}" if index is not None else "") + (f" ({split})" if split else "")
        n = self.num_nodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
            raise ValueError(
                f"{where}: empty graph: expected num_nodes >= 1, found {n!r}; drop the instance or add its nodes"
            )
        feats = self.node_features
        if feats.ndim != 2 or feats.shape[0] != n:
            raise ValueError(f"{where}: expected node_features of shape ({n}, F), found {feats.shape}")
        if not np.all(np.isfinite(feats)):
            raise ValueError(f"{where}: expected finite node_features, found NaN or inf")
        if self.edges.ndim != 2 or self.edges.shape[1] != 2 or not np.issubdtype(self.edges.dtype, np.integer):
            raise ValueError(
                f"{where}: expected integer edges of shape (E, 2), found {self.edges.dtype} {self.edges.shape}"
            )
        if self.edge_types.shape != (self.edges.shape[0],) or not np.issubdtype(self.edge_types.dtype, np.integer):
            raise ValueError(
                f"{where}: expected integer edge_types of shape ({self.edges.shape[0]},) (one per edge), "
                f"found {self.edge_types.dtype} {self.edge_types.shape}"
            )
        bad = np.flatnonzero(np.any((self.edges < 0) | (self.edges >= n), axis=1))
        if bad.size:
            e = int(bad[0])
            raise ValueError(
                f"{where}: edge {e} = {self.edges[e].tolist()} has an endpoint out of range: expected node "
                f"indices in 0..{n - 1}; fix the edge list or num_nodes"
            )
        bad = np.flatnonzero((self.edge_types < 0) | (self.edge_types >= n_edge_types))
        if bad.size:
            e = int(bad[0])
            raise ValueError(
                f"{where}: edge {e} has unknown edge type {int(self.edge_types[e])}: expected 0..{n_edge_types - 1} "
                f"(n_edge_types={n_edge_types}); raise n_edge_types or fix the edge types"
            )
        self._validate_target(where, task, num_classes)

    def _validate_target(self, where: str, task: str, num_classes: int | None) -> None:
        n, t = self.num_nodes, self.target
        is_int = isinstance(t, (int, np.integer)) and not isinstance(t, bool)
        if task == "regression":
            if not isinstance(t, (int, float, np.integer, np.floating)) or not np.isfinite(t):
                raise ValueError(f"{where}: expected a finite float regression target, found {t!r}")
        elif task == "classification":
            if num_classes is None:
                raise ValueError(f"{where}: task 'classification' needs num_classes to check the label")
            if not is_int or not 0 <= t < num_classes:
                raise ValueError(
                    f"{where}: label out of range: expected a class id in 0..{num_classes - 1}, found {t!r}"
                )
        elif task == "node_selection":
            if not is_int or not 0 <= t < n:
                raise ValueError(
                    f"{where}: label out of range: expected a target node index in 0..{n - 1}, found {t!r}"
                )
        else:
            raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
        q = self.question
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not 0 <= q < n):
            raise ValueError(f"{where}: expected the question node index in 0..{n - 1}, found {q!r}")


def graph_batch(instance: GraphInstance, task: str) -> Batch:
    """One graph as one key: `node_features`, `edges`, `edge_types`, `target` (1,) and maybe `question` (1,)."""
    dtype = np.float64 if task == "regression" else np.int64
    inputs = {
        "node_features": np.ascontiguousarray(instance.node_features, dtype=np.float64),
        "edges": np.ascontiguousarray(instance.edges, dtype=np.int64),
        "edge_types": np.ascontiguousarray(instance.edge_types, dtype=np.int64),
        "target": np.array([instance.target], dtype=dtype),
    }
    if instance.question is not None:
        inputs["question"] = np.array([instance.question], dtype=np.int64)
    return Batch(inputs=inputs, size=1, fields={"n_nodes": instance.num_nodes, "n_edges": instance.num_edges})


def ggsnn_batch(instance: GraphInstance, n_edge_types: int, steps: int, task: str) -> Batch:
    """One graph as one key for the GGS-NN graph (`amp_notebook.models.ggsnn`).

    Inputs: `node_features` (N, F) float64; for every edge type e, `src{e}` and `dst{e}` (steps, E_e) int64,
    the sources and destinations of that type's edges tiled once per propagation step (the graph ungroups
    them with counter `t`, so step t's Gather and ScatterSum join the index message of the same state; E_e
    may be 0); `target` (1,) (int64 class id or node index, float64 for regression); for node selection also
    `node_ids` (N, 1) float64 = 0..N-1, the column a Flatmap turns into the state field `node`.
    Fields: `n_nodes`, `n_edges`.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1 (propagation steps), got {steps!r}")
    base = graph_batch(instance, task)
    inputs = {"node_features": base.inputs["node_features"], "target": base.inputs["target"]}
    for e in range(n_edge_types):
        typed = instance.edges[instance.edge_types == e].astype(np.int64)
        inputs[f"src{e}"] = np.ascontiguousarray(np.tile(typed[:, 0], (steps, 1)))
        inputs[f"dst{e}"] = np.ascontiguousarray(np.tile(typed[:, 1], (steps, 1)))
    if task == "node_selection":
        inputs["node_ids"] = np.arange(instance.num_nodes, dtype=np.float64)[:, None]
    return Batch(inputs=inputs, size=1, fields=dict(base.fields))


def ggsnn_dataset(
    instances: Sequence[GraphInstance],
    n_edge_types: int,
    task: Task,
    steps: int,
    *,
    val_instances: Sequence[GraphInstance] = (),
    num_classes: int | None = None,
    name: str = "graphs",
) -> Dataset:
    """As `graph_dataset` (same checks and meta, plus `steps`), with keys built by `ggsnn_batch`."""
    checked = graph_dataset(
        instances, n_edge_types, task, val_instances=val_instances, num_classes=num_classes, name=name
    )
    return Dataset(
        name=name,
        train=[ggsnn_batch(g, n_edge_types, steps, task) for g in instances],
        val=[ggsnn_batch(g, n_edge_types, steps, task) for g in val_instances],
        num_classes=checked.num_classes,
        meta={**checked.meta, "steps": steps},
    )


def graph_dataset(
    instances: Sequence[GraphInstance],
    n_edge_types: int,
    task: Task = "classification",
    *,
    val_instances: Sequence[GraphInstance] = (),
    num_classes: int | None = None,
    name: str = "graphs",
) -> Dataset:
    """One key per graph (validated): training keys from `instances`, validation keys from `val_instances`.

    `num_classes` is required for classification. All graphs must share one feature width and either all or
    none may have a question node. Meta: `n_edge_types`, `feature_width`, `task`, `num_classes`.
    """
    if task not in TASKS:
        raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
    if task == "classification" and num_classes is None:
        raise ValueError("num_classes: required for task='classification' (labels are checked against it)")
    if not instances:
        raise ValueError("instances: expected at least one training graph, got none")
    width = instances[0].node_features.shape[1] if instances[0].node_features.ndim == 2 else -1
    has_question = instances[0].question is not None
    for split, group in (("train", instances), ("val", val_instances)):
        for i, inst in enumerate(group):
            inst.validate(n_edge_types, task, num_classes, index=i, split=split)
            if inst.feature_width != width:
                raise ValueError(
                    f"graph instance {i} ({split}): expected node_features width {width} (that of training "
                    f"instance 0), found {inst.feature_width}; use one feature encoding for the whole dataset"
                )
            if (inst.question is not None) != has_question:
                raise ValueError(
                    f"graph instance {i} ({split}): expected {'a' if has_question else 'no'} question node "
                    "(as training instance 0), found the opposite; give all instances a question or none"
                )
    return Dataset(
        name=name,
        train=[graph_batch(g, task) for g in instances],
        val=[graph_batch(g, task) for g in val_instances],
        num_classes=num_classes if task == "classification" else None,
        meta={"n_edge_types": n_edge_types, "feature_width": width, "task": task, "num_classes": num_classes},
    )


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")


# ---------------------------------------------------------------------------------------------------------
# bAbI task 15 (basic deduction)

BABI15_EDGE_TYPES: tuple[str, ...] = ("is_a", "afraid_of", "is_a_reverse", "afraid_of_reverse")
BABI15_TYPES: tuple[str, ...] = (
    "mouse", "sheep", "wolf", "cat", "lion", "dog", "fox", "owl", "bear", "rabbit",
    "snake", "frog", "horse", "goat", "tiger", "hawk", "deer", "swan", "eagle", "bat",
)  # fmt: skip
BABI15_NAMES: tuple[str, ...] = (
    "Gertrude", "Winona", "Jessica", "Emily", "Bill", "Fred", "Mary", "Julie",
    "Sandra", "Daniel", "John", "Jeff", "Greg", "Lily", "Bernhard", "Brian",
)  # fmt: skip
# Node annotation columns: question marker, is an individual, is a type, then one-hot of the type name.
BABI15_FEATURE_WIDTH = 3 + len(BABI15_TYPES)

Fact = tuple[str, str, str]


def babi15_answer(facts: Sequence[Fact], who: str) -> str:
    """The answer to "What is `who` afraid of?", checking that exactly one chain of facts gives it."""
    kinds = [obj for subj, rel, obj in facts if subj == who and rel == "is_a"]
    if len(kinds) != 1:
        raise ValueError(f"babi15: expected exactly one 'is_a' fact about {who!r}, found {kinds}")
    fears = [obj for subj, rel, obj in facts if subj == kinds[0] and rel == "afraid_of"]
    if len(fears) != 1:
        raise ValueError(f"babi15: expected exactly one 'afraid_of' fact about {kinds[0]!r}, found {fears}")
    return fears[0]


def _babi15_instance(rng: np.random.Generator, inflate_to: int, task: Task) -> GraphInstance:
    n_types = min(len(BABI15_TYPES), max(2, inflate_to // 2))
    n_people = inflate_to - n_types
    types = [BABI15_TYPES[i] for i in rng.choice(len(BABI15_TYPES), size=n_types, replace=False).tolist()]
    people = [BABI15_NAMES[i] for i in rng.permutation(len(BABI15_NAMES))[:n_people].tolist()]
    people += [f"person{k}" for k in range(len(BABI15_NAMES) + 1, n_people + 1)]
    facts: list[Fact] = [(p, "is_a", types[int(rng.integers(n_types))]) for p in people]
    for i, kind in enumerate(types):
        other = int(rng.integers(n_types - 1))
        facts.append((kind, "afraid_of", types[other + (other >= i)]))
    facts = [facts[i] for i in rng.permutation(len(facts)).tolist()]

    names = [types[i] if i < n_types else people[i - n_types] for i in rng.permutation(inflate_to).tolist()]
    node = {name: i for i, name in enumerate(names)}
    who = people[int(rng.integers(n_people))]
    answer = babi15_answer(facts, who)

    feats = np.zeros((inflate_to, BABI15_FEATURE_WIDTH), dtype=np.float64)
    feats[node[who], 0] = 1.0
    for name, i in node.items():
        if name in BABI15_TYPES:
            feats[i, 2] = 1.0
            feats[i, 3 + BABI15_TYPES.index(name)] = 1.0
        else:
            feats[i, 1] = 1.0
    rel_type = {"is_a": 0, "afraid_of": 1}
    forward = [(node[s], node[o], rel_type[r]) for s, r, o in facts]
    triples = forward + [(o, s, t + 2) for s, o, t in forward]
    edges = np.array([(s, o) for s, o, _ in triples], dtype=np.int64)
    answer_class = BABI15_TYPES.index(answer)
    return GraphInstance(
        num_nodes=inflate_to,
        node_features=feats,
        edges=edges,
        edge_types=np.array([t for _, _, t in triples], dtype=np.int64),
        target=node[answer] if task == "node_selection" else answer_class,
        question=node[who],
        meta={
            "node_names": names,
            "facts": facts,
            "question_text": f"What is {who} afraid of?",
            "answer": answer,
            "answer_node": node[answer],
            "answer_class": answer_class,
        },
    )


def babi15_graphs(n: int, seed: int = 0, inflate_to: int = 54, task: Task = "node_selection") -> list[GraphInstance]:
    """`n` bAbI-15 graphs of exactly `inflate_to` nodes (deterministic given `seed`).

    Each graph has `min(20, max(2, inflate_to // 2))` type nodes, each afraid of exactly one other type, and
    the remaining nodes are individuals, each of exactly one type, so every question has exactly one answer
    (checked by `babi15_answer`). With `inflate_to=8` this is the original task's size (4 types, 4 people);
    the extra nodes are distractors. Nodes are shuffled so that positions carry no information.

    The target is the answer's node index (`task="node_selection"`) or its index in `BABI15_TYPES`
    (`task="classification"`, 20 classes); `question` is the asked individual's node. Node annotations
    (width `BABI15_FEATURE_WIDTH`): question marker, is-individual, is-type, one-hot type name. Edge types:
    `BABI15_EDGE_TYPES`. Meta: node names, facts (subject, relation, object), question text and answer.
    """
    _check_count("n", n, 0)
    _check_count("inflate_to", inflate_to, 3)
    if task not in ("node_selection", "classification"):
        raise ValueError(f"task: expected 'node_selection' or 'classification', got {task!r}")
    rng = np.random.default_rng(seed)
    return [_babi15_instance(rng, inflate_to, task) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------
# Random molecules

ELEMENTS: tuple[str, ...] = ("H", "C", "N", "O", "F")
VALENCE: dict[str, int] = {"H": 1, "C": 4, "N": 3, "O": 2, "F": 1}
BOND_TYPES: tuple[str, ...] = ("single", "double", "triple")
_HEAVY: tuple[str, ...] = ("C", "N", "O", "F")
_HEAVY_P = np.array([0.62, 0.14, 0.16, 0.08])

ATOM_WEIGHTS: dict[str, float] = {"H": 0.3, "C": 1.0, "N": 1.4, "O": 1.8, "F": 2.2}
BOND_WEIGHTS: dict[int, float] = {1: 0.5, 2: 1.1, 3: 1.9}
RING_WEIGHT = -0.7
DEGREE_WEIGHT = 0.1

Bond = tuple[int, int, int]


def molecule_target(elements: Sequence[str], bonds: Sequence[Bond]) -> float:
    """Regression target of a connected molecule with bonds (i, j, order):

    `sum_atoms ATOM_WEIGHTS[element] + sum_bonds BOND_WEIGHTS[order] + RING_WEIGHT * rings
    + DEGREE_WEIGHT * d_max**2`, where `rings = bonds - atoms + 1` (the cycle rank of a connected graph) and
    `d_max` is the largest number of non-hydrogen neighbours of a non-hydrogen atom (0 for one heavy atom).
    The last term is the small nonlinear part: it needs neighbourhood information, not just counts.
    """
    heavy_degree = [0] * len(elements)
    for i, j, _ in bonds:
        if elements[i] != "H" and elements[j] != "H":
            heavy_degree[i] += 1
            heavy_degree[j] += 1
    rings = len(bonds) - len(elements) + 1
    return (
        sum(ATOM_WEIGHTS[e] for e in elements)
        + sum(BOND_WEIGHTS[order] for _, _, order in bonds)
        + RING_WEIGHT * rings
        + DEGREE_WEIGHT * max(heavy_degree) ** 2
    )


def _heavy_skeleton(rng: np.random.Generator, n_heavy: int) -> tuple[list[str], dict[tuple[int, int], int]]:
    """A random spanning tree of heavy atoms; the total free valence stays >= 1 while atoms remain to attach."""
    elements: list[str] = []
    bonds: dict[tuple[int, int], int] = {}
    free: list[int] = []
    for i in range(n_heavy):
        remaining, total_free = n_heavy - 1 - i, sum(free)
        ok = np.array([i == 0 or remaining == 0 or total_free + VALENCE[e] - 2 >= 1 for e in _HEAVY])
        p = np.where(ok, _HEAVY_P, 0.0)
        element = _HEAVY[int(rng.choice(len(_HEAVY), p=p / p.sum()))]
        elements.append(element)
        free.append(VALENCE[element])
        if i > 0:
            candidates = [k for k in range(i) if free[k] > 0]
            k = candidates[int(rng.integers(len(candidates)))]
            bonds[(k, i)] = 1
            free[k] -= 1
            free[i] -= 1
    return elements, bonds


def _free_valence(elements: Sequence[str], bonds: dict[tuple[int, int], int]) -> list[int]:
    free = [VALENCE[e] for e in elements]
    for (i, j), order in bonds.items():
        free[i] -= order
        free[j] -= order
    return free


def _random_molecule(rng: np.random.Generator, min_heavy: int, max_heavy: int) -> GraphInstance:
    n_heavy = int(rng.integers(min_heavy, max_heavy + 1))
    elements, bonds = _heavy_skeleton(rng, n_heavy)
    for _ in range(int(rng.integers(0, 3)) if n_heavy >= 3 else 0):  # ring closures
        free = _free_valence(elements, bonds)
        open_pairs = [
            (i, j) for i in range(n_heavy) for j in range(i + 1, n_heavy) if free[i] and free[j] and (i, j) not in bonds
        ]
        if open_pairs:
            bonds[open_pairs[int(rng.integers(len(open_pairs)))]] = 1
    pairs = list(bonds)
    for pair in [pairs[i] for i in rng.permutation(len(pairs)).tolist()]:  # double and triple bonds
        while bonds[pair] < 3 and rng.random() < 0.35:
            free = _free_valence(elements, bonds)
            if not (free[pair[0]] and free[pair[1]]):
                break
            bonds[pair] += 1
    for i, missing in enumerate(_free_valence(elements, bonds)[:n_heavy]):  # saturate with hydrogens
        for _ in range(missing):
            elements.append("H")
            bonds[(i, len(elements) - 1)] = 1
    bond_list = [(i, j, order) for (i, j), order in sorted(bonds.items())]
    return _molecule_instance(elements, bond_list, molecule_target(elements, bond_list))


def _one_hot_elements(elements: Sequence[str]) -> np.ndarray:
    feats = np.zeros((len(elements), len(ELEMENTS)), dtype=np.float64)
    feats[np.arange(len(elements)), [ELEMENTS.index(e) for e in elements]] = 1.0
    return feats


def _undirected(bonds: Sequence[Bond]) -> tuple[np.ndarray, np.ndarray]:
    edges = [(i, j) for i, j, _ in bonds] + [(j, i) for i, j, _ in bonds]
    types = [order - 1 for _, _, order in bonds] * 2
    return np.array(edges, dtype=np.int64).reshape(-1, 2), np.array(types, dtype=np.int64)


def _formula(elements: Sequence[str]) -> str:
    counts = {e: elements.count(e) for e in ("C", "H", "N", "O", "F") if e in elements}
    return "".join(f"{e}{c if c > 1 else ''}" for e, c in counts.items())


def _molecule_instance(elements: list[str], bonds: list[Bond], target: float) -> GraphInstance:
    edges, types = _undirected(bonds)
    return GraphInstance(
        num_nodes=len(elements),
        node_features=_one_hot_elements(elements),
        edges=edges,
        edge_types=types,
        target=float(target),
        meta={
            "elements": elements,
            "bonds": bonds,
            "formula": _formula(elements),
            "rings": len(bonds) - len(elements) + 1,
        },
    )


def molecule_graphs(n: int, seed: int = 0, max_heavy_atoms: int = 9, min_heavy_atoms: int = 1) -> list[GraphInstance]:
    """`n` random molecules with `min_heavy_atoms..max_heavy_atoms` non-hydrogen atoms (QM9 has up to 9).

    Heavy atoms (C 62%, N 14%, O 16%, F 8%) are joined by a random spanning tree, up to two ring-closing
    single bonds are added, each bond is raised to double, then triple, with p = 0.35 per step while both atoms
    have free valence, and every remaining valence is filled with a hydrogen, so each atom's bond orders sum
    exactly to its valence (C 4, N 3, O 2, F 1, H 1) and the molecule is connected.

    Node features: one-hot over `ELEMENTS`; edge type = bond order - 1 (`BOND_TYPES`), each bond as two
    directed edges. Target: `molecule_target`. Meta: elements, bonds (i, j, order) with i < j, formula, ring
    count. Deterministic given `seed`.
    """
    _check_count("n", n, 0)
    _check_count("min_heavy_atoms", min_heavy_atoms, 1)
    _check_count("max_heavy_atoms", max_heavy_atoms, min_heavy_atoms)
    rng = np.random.default_rng(seed)
    return [_random_molecule(rng, min_heavy_atoms, max_heavy_atoms) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------
# QM9 xyz files

QM9_PROPERTIES: tuple[str, ...] = (
    "A", "B", "C", "mu", "alpha", "homo", "lumo", "gap", "r2", "zpve", "U0", "U", "H", "G", "Cv",
)  # fmt: skip
# Single-bond covalent radii in angstrom (Cordero et al., Dalton Trans. 2008; C as sp3).
COVALENT_RADII: dict[str, float] = {"H": 0.31, "C": 0.76, "N": 0.71, "O": 0.66, "F": 0.57}
BOND_TOLERANCE = 1.15


@dataclass(frozen=True)
class QM9Molecule:
    """One QM9 molecule as read from its xyz file."""

    path: str
    gdb_id: int
    elements: list[str]
    coordinates: np.ndarray  # float64 (na, 3), angstrom
    charges: np.ndarray  # float64 (na,), Mulliken partial charges
    properties: dict[str, float]
    frequencies: np.ndarray  # float64, harmonic vibrational frequencies in cm^-1
    smiles: tuple[str, ...]  # GDB-17 and relaxed-geometry SMILES
    inchi: tuple[str, ...]

    def bonds(self, tolerance: float = BOND_TOLERANCE) -> list[tuple[int, int]]:
        """Pairs i < j closer than `tolerance * (r_i + r_j)` (covalent radii, `COVALENT_RADII`)."""
        radii = np.array([COVALENT_RADII[e] for e in self.elements])
        dist = np.linalg.norm(self.coordinates[:, None, :] - self.coordinates[None, :, :], axis=-1)
        close = dist < tolerance * (radii[:, None] + radii[None, :])
        i, j = np.nonzero(np.triu(close, k=1))
        return list(zip(i.tolist(), j.tolist(), strict=True))


def _float(token: str) -> float:
    """A float in QM9's notation, where Mathematica writes `1.2*^-6` for 1.2e-6."""
    return float(token.replace("*^", "e"))


def _is_float(token: str) -> bool:
    try:
        _float(token)
    except ValueError:
        return False
    return True


def _looks_like_atom(fields: list[str]) -> bool:
    return len(fields) == 5 and fields[0].isalpha() and all(_is_float(f) for f in fields[1:])


def _line(lines: list[str], number: int, path: Path, what: str, na: int) -> list[str]:
    if number > len(lines):
        raise ValueError(
            f"{path}, line {number}: expected {what}, found end of file; the file is truncated or the atom count "
            f"{na} on line 1 is too large"
        )
    return lines[number - 1].split()


def _atom(fields: list[str], path: Path, number: int, atom: int, na: int) -> tuple[str, list[float]]:
    if fields and all(_is_float(f) for f in fields):
        raise ValueError(
            f"{path}, line {number}: wrong atom count: line 1 declares {na} atoms but only {atom} atom lines "
            "follow (this line looks like the frequencies line); set line 1 to the number of atom lines"
        )
    if len(fields) != 5:
        raise ValueError(
            f"{path}, line {number}: malformed coordinate line for atom {atom + 1} of {na}: expected 5 fields "
            f"'element x y z mulliken_charge', found {len(fields)}: {' '.join(fields)!r}"
        )
    element = fields[0]
    if element not in COVALENT_RADII:
        raise ValueError(
            f"{path}, line {number}: unknown element {element!r}: expected one of {', '.join(COVALENT_RADII)} "
            "(the elements of QM9); extend COVALENT_RADII to read other molecules"
        )
    try:
        values = [_float(f) for f in fields[1:]]
    except ValueError:
        raise ValueError(
            f"{path}, line {number}: malformed coordinate line for atom {atom + 1} of {na}: expected numbers for "
            f"x y z and the charge, found {' '.join(fields[1:])!r}"
        ) from None
    return element, values


def _properties(fields: list[str], path: Path) -> tuple[int, dict[str, float]]:
    k = 0
    if fields and not _is_float(fields[0]):
        k = 1  # the "gdb" tag
    if len(fields) <= k or not fields[k].isdigit():
        raise ValueError(
            f"{path}, line 2: expected 'gdb <id>' followed by {len(QM9_PROPERTIES)} properties, found "
            f"{' '.join(fields[:3])!r}"
        )
    gdb_id, values = int(fields[k]), fields[k + 1 :]
    if len(values) < len(QM9_PROPERTIES):
        missing = ", ".join(QM9_PROPERTIES[len(values) :])
        raise ValueError(
            f"{path}, line 2: missing property: expected {len(QM9_PROPERTIES)} values "
            f"({' '.join(QM9_PROPERTIES)}) after the id, found {len(values)} (missing {missing})"
        )
    if len(values) > len(QM9_PROPERTIES):
        raise ValueError(
            f"{path}, line 2: expected {len(QM9_PROPERTIES)} properties ({' '.join(QM9_PROPERTIES)}) after the "
            f"id, found {len(values)}"
        )
    props: dict[str, float] = {}
    for name, token in zip(QM9_PROPERTIES, values, strict=True):
        try:
            props[name] = _float(token)
        except ValueError:
            raise ValueError(f"{path}, line 2: property {name}: expected a number, found {token!r}") from None
    return gdb_id, props


def load_qm9_xyz(path: str | Path) -> QM9Molecule:
    """Read one QM9 xyz file (Ramakrishnan et al., Sci. Data 2014).

    Line 1: the atom count na. Line 2: `gdb <id>` and 15 properties A B C mu alpha homo lumo gap r2 zpve U0 U
    H G Cv. Lines 3..na+2: `element x y z mulliken_charge`. Then one line of harmonic frequencies, one of
    SMILES (GDB-17, relaxed) and one of InChI (GDB-17, relaxed). Numbers may use Mathematica's `*^` exponent.
    Errors name the file and line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    first = lines[0].strip() if lines else ""
    if not first.isdigit() or int(first) == 0:
        raise ValueError(f"{path}, line 1: wrong atom count: expected a positive integer, found {first!r}")
    na = int(first)
    gdb_id, props = _properties(_line(lines, 2, path, "the 'gdb <id>' property line", na), path)
    elements: list[str] = []
    values: list[list[float]] = []
    for atom in range(na):
        number = 3 + atom
        element, numbers = _atom(_line(lines, number, path, f"atom {atom + 1} of {na}", na), path, number, atom, na)
        elements.append(element)
        values.append(numbers)
    number = na + 3
    freq_fields = _line(lines, number, path, "the harmonic frequencies line", na)
    if _looks_like_atom(freq_fields):
        raise ValueError(
            f"{path}, line {number}: wrong atom count: line 1 declares {na} atoms but this line is another atom "
            "line; set line 1 to the number of atom lines"
        )
    try:
        frequencies = np.array([_float(f) for f in freq_fields], dtype=np.float64)
    except ValueError:
        raise ValueError(
            f"{path}, line {number}: expected the harmonic frequencies (numbers), found {' '.join(freq_fields)!r}"
        ) from None
    smiles = tuple(_line(lines, na + 4, path, "the SMILES line", na))
    inchi = tuple(_line(lines, na + 5, path, "the InChI line", na))
    table = np.array(values, dtype=np.float64)
    return QM9Molecule(
        path=str(path),
        gdb_id=gdb_id,
        elements=elements,
        coordinates=table[:, :3],
        charges=table[:, 3],
        properties=props,
        frequencies=frequencies,
        smiles=smiles,
        inchi=inchi,
    )


def qm9_graph(molecule: QM9Molecule, target: str = "U0", tolerance: float = BOND_TOLERANCE) -> GraphInstance:
    """A molecule as a graph: one-hot element features, inferred bonds as edges of type 0 (order unknown)."""
    if target not in molecule.properties:
        raise ValueError(
            f"{molecule.path}: target {target!r}: expected one of the QM9 properties {', '.join(QM9_PROPERTIES)}"
        )
    bonds = [(i, j, 1) for i, j in molecule.bonds(tolerance)]
    edges, types = _undirected(bonds)
    return GraphInstance(
        num_nodes=len(molecule.elements),
        node_features=_one_hot_elements(molecule.elements),
        edges=edges,
        edge_types=types,
        target=molecule.properties[target],
        meta={
            "path": molecule.path,
            "gdb_id": molecule.gdb_id,
            "elements": molecule.elements,
            "bonds": [(i, j) for i, j, _ in bonds],
            "coordinates": molecule.coordinates,
            "smiles": molecule.smiles,
            "formula": _formula(molecule.elements),
        },
    )


def load_qm9_directory(directory: str | Path, target: str = "U0", limit: int | None = None) -> list[GraphInstance]:
    """Every `*.xyz` file of `directory` in name order (at most `limit`), as graphs with the `target` property.

    Bonds: atoms i, j are bonded when closer than `BOND_TOLERANCE` (1.15) times the sum of their covalent
    radii (`COVALENT_RADII`); all bonds have edge type 0, so use `n_edge_types=1` in `graph_dataset`.
    """
    if limit is not None:
        _check_count("limit", limit, 1)
    if target not in QM9_PROPERTIES:
        raise ValueError(f"target: expected one of the QM9 properties {', '.join(QM9_PROPERTIES)}, got {target!r}")
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: expected a directory of QM9 .xyz files, found no such directory")
    paths = sorted(directory.glob("*.xyz"))[:limit]
    if not paths:
        raise FileNotFoundError(
            f"{directory}: expected QM9 .xyz files (dsgdb9nsd_*.xyz from the QM9 archive), found none"
        )
    return [qm9_graph(load_qm9_xyz(p), target) for p in paths]
