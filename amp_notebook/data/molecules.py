"""Random molecule-like graphs for regression: H, C, N, O, F with valence-respecting bonds.

Connected molecules whose bond orders (single, double, triple; edge types 0, 1, 2) add up exactly to each
atom's valence, with a regression target computed from the structure (formula in `molecule_target`).
Undirected bonds appear as two directed edges (i -> j and j -> i) of the same type.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from amp_notebook.data.batch import check_count
from amp_notebook.data.graphs import GraphInstance

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
    check_count("n", n, 0)
    check_count("min_heavy_atoms", min_heavy_atoms, 1)
    check_count("max_heavy_atoms", max_heavy_atoms, min_heavy_atoms)
    rng = np.random.default_rng(seed)
    return [_random_molecule(rng, min_heavy_atoms, max_heavy_atoms) for _ in range(n)]
