"""QM9's published xyz files as graphs (format in `load_qm9_xyz`), with bonds inferred from interatomic
distances and a chosen property (default U0) as the regression target. Nothing is downloaded: point
`load_qm9_directory` at files you have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from amp_notebook.data.batch import check_count
from amp_notebook.data.graphs import GraphInstance
from amp_notebook.data.molecules import _formula, _one_hot_elements, _undirected
from amp_notebook.errors import DataFileNotFoundError, DataFormatError, SettingError

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
        raise DataFormatError(
            f"{path}, line {number}: expected {what}, found end of file; the file is truncated or the atom count "
            f"{na} on line 1 is too large"
        )
    return lines[number - 1].split()


def _atom(fields: list[str], path: Path, number: int, atom: int, na: int) -> tuple[str, list[float]]:
    if fields and all(_is_float(f) for f in fields):
        raise DataFormatError(
            f"{path}, line {number}: wrong atom count: line 1 declares {na} atoms but only {atom} atom lines "
            "follow (this line looks like the frequencies line); set line 1 to the number of atom lines"
        )
    if len(fields) != 5:
        raise DataFormatError(
            f"{path}, line {number}: malformed coordinate line for atom {atom + 1} of {na}: expected 5 fields "
            f"'element x y z mulliken_charge', found {len(fields)}: {' '.join(fields)!r}"
        )
    element = fields[0]
    if element not in COVALENT_RADII:
        raise DataFormatError(
            f"{path}, line {number}: unknown element {element!r}: expected one of {', '.join(COVALENT_RADII)} "
            "(the elements of QM9); extend COVALENT_RADII to read other molecules"
        )
    try:
        values = [_float(f) for f in fields[1:]]
    except ValueError:
        raise DataFormatError(
            f"{path}, line {number}: malformed coordinate line for atom {atom + 1} of {na}: expected numbers for "
            f"x y z and the charge, found {' '.join(fields[1:])!r}"
        ) from None
    return element, values


def _properties(fields: list[str], path: Path) -> tuple[int, dict[str, float]]:
    k = 0
    if fields and not _is_float(fields[0]):
        k = 1  # the "gdb" tag
    if len(fields) <= k or not fields[k].isdigit():
        raise DataFormatError(
            f"{path}, line 2: expected 'gdb <id>' followed by {len(QM9_PROPERTIES)} properties, found "
            f"{' '.join(fields[:3])!r}"
        )
    gdb_id, values = int(fields[k]), fields[k + 1 :]
    if len(values) < len(QM9_PROPERTIES):
        missing = ", ".join(QM9_PROPERTIES[len(values) :])
        raise DataFormatError(
            f"{path}, line 2: missing property: expected {len(QM9_PROPERTIES)} values "
            f"({' '.join(QM9_PROPERTIES)}) after the id, found {len(values)} (missing {missing})"
        )
    if len(values) > len(QM9_PROPERTIES):
        raise DataFormatError(
            f"{path}, line 2: expected {len(QM9_PROPERTIES)} properties ({' '.join(QM9_PROPERTIES)}) after the "
            f"id, found {len(values)}"
        )
    props: dict[str, float] = {}
    for name, token in zip(QM9_PROPERTIES, values, strict=True):
        try:
            props[name] = _float(token)
        except ValueError:
            raise DataFormatError(f"{path}, line 2: property {name}: expected a number, found {token!r}") from None
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
        raise DataFormatError(f"{path}, line 1: wrong atom count: expected a positive integer, found {first!r}")
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
        raise DataFormatError(
            f"{path}, line {number}: wrong atom count: line 1 declares {na} atoms but this line is another atom "
            "line; set line 1 to the number of atom lines"
        )
    try:
        frequencies = np.array([_float(f) for f in freq_fields], dtype=np.float64)
    except ValueError:
        raise DataFormatError(
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
        raise SettingError(
            "target",
            f"{molecule.path}: target {target!r}: expected one of the QM9 properties {', '.join(QM9_PROPERTIES)}",
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
        check_count("limit", limit, 1)
    if target not in QM9_PROPERTIES:
        raise SettingError(
            "target", f"target: expected one of the QM9 properties {', '.join(QM9_PROPERTIES)}, got {target!r}"
        )
    directory = Path(directory)
    if not directory.is_dir():
        raise DataFileNotFoundError(f"{directory}: expected a directory of QM9 .xyz files, found no such directory")
    paths = sorted(directory.glob("*.xyz"))[:limit]
    if not paths:
        raise DataFileNotFoundError(
            f"{directory}: expected QM9 .xyz files (dsgdb9nsd_*.xyz from the QM9 archive), found none"
        )
    return [qm9_graph(load_qm9_xyz(p), target) for p in paths]
