"""Buckets of trees as one key: the "forest" layout that ``models.tree_lstm_forest`` walks level by level.

A key of :func:`~amp_notebook.data.trees.trees_dataset` is one tree; a forest key holds several. Every node
of the bucket gets a row of one state table: all leaves first (tree by tree, left to right), then the
branches ordered by *level* = height - 1 (a branch whose children are both leaves has level 0), so the
children of every level-t branch sit in rows that are filled before level t runs. The number of levels,
the largest tree height in the bucket, is the state field ``levels``::

    leaf_words (L,)          word ids of the leaves (rows 0 .. L-1)
    leaf_rows  (L,)          0 .. L-1, where the leaf states go in the table
    labels     (R,)          the label of every row (R = all nodes of the bucket)
    left, right, rows (B, 2) one line per branch: [level, row of its left child | right child | itself]
    root_rows  (K,)          the row of each tree's root, tree by tree

The model partitions ``left``, ``right`` and ``rows`` by their level column, so level t's branches arrive
as three index vectors with state field ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from amp_notebook.data.batch import Batch, Dataset, check_count
from amp_notebook.errors import SettingError


def _heights(positions: np.ndarray, is_leaf: np.ndarray) -> np.ndarray:
    """Height of every node (leaves 0) of one tree given in post-order (children before parents)."""
    height: dict[int, int] = {}
    out = np.empty(positions.size, dtype=np.int64)
    for i, (pos, leaf) in enumerate(zip(positions.tolist(), is_leaf.tolist(), strict=True)):
        h = 0 if leaf else 1 + max(height.pop(2 * pos), height.pop(2 * pos + 1))
        height[pos] = out[i] = h
    return out


def forest_batch(trees: Sequence[Batch]) -> Batch:
    """Several tree keys (as ``tree_batch`` builds them: ``positions`` in post-order, ``is_leaf``,
    ``leaf_words``, ``labels``) as ONE key in the layout of the module docstring; size = number of trees."""
    if not trees:
        raise SettingError("trees", "forest_batch: expected at least one tree, got none")
    words: list[np.ndarray] = []
    branch_lines: list[tuple[int, int, int, int]] = []
    leaf_count = sum(int(t.inputs["is_leaf"].sum()) for t in trees)
    n_rows = sum(int(t.inputs["positions"].size) for t in trees)
    labels = np.empty(n_rows, dtype=np.int64)
    next_leaf = 0
    branches: list[tuple[int, int, int, dict[int, int], int]] = []  # (level, tree, post-order index, rows, pos)
    row_maps: list[dict[int, int]] = []
    for k, tree in enumerate(trees):
        positions, is_leaf = tree.inputs["positions"], tree.inputs["is_leaf"]
        rows: dict[int, int] = {}
        row_maps.append(rows)
        for i, (pos, leaf, level) in enumerate(
            zip(positions.tolist(), is_leaf.tolist(), (_heights(positions, is_leaf) - 1).tolist(), strict=True)
        ):
            if leaf:
                rows[pos] = next_leaf
                labels[next_leaf] = tree.inputs["labels"][i]
                next_leaf += 1
            else:
                branches.append((level, k, i, rows, pos))
        words.append(tree.inputs["leaf_words"])
    branches.sort(key=lambda b: (b[0], b[1], b[2]))
    for row, (level, k, i, rows, pos) in enumerate(branches, start=leaf_count):
        rows[pos] = row
        labels[row] = trees[k].inputs["labels"][i]
        branch_lines.append((level, rows[2 * pos], rows[2 * pos + 1], row))
    lines = np.array(branch_lines, dtype=np.int64).reshape(-1, 4)
    return Batch(
        inputs={
            "leaf_words": np.concatenate(words).astype(np.int64),
            "leaf_rows": np.arange(leaf_count, dtype=np.int64),
            "labels": labels,
            "left": lines[:, [0, 1]],
            "right": lines[:, [0, 2]],
            "rows": lines[:, [0, 3]],
            "root_rows": np.array([rows[1] for rows in row_maps], dtype=np.int64),
        },
        size=len(trees),
        fields={"levels": int(lines[:, 0].max()) + 1 if len(lines) else 0, "n_nodes": n_rows},
    )


def forest_dataset(trees: Dataset, trees_per_key: int, val_trees_per_key: int | None = None) -> Dataset:
    """The keys of a one-tree-per-key dataset regrouped into forests of ``trees_per_key`` consecutive trees
    (the last key of each split may hold fewer), validation keys into forests of ``val_trees_per_key``
    (default: the same; validation runs forward only, so its bucket size changes no update); same meta,
    plus ``trees_per_key``."""
    val_size = trees_per_key if val_trees_per_key is None else val_trees_per_key
    check_count("trees_per_key", trees_per_key, 1)
    check_count("val_trees_per_key", val_size, 1)

    def buckets(keys: list[Batch], size: int) -> list[Batch]:
        return [forest_batch(keys[i : i + size]) for i in range(0, len(keys), size)]

    return Dataset(
        name=f"{trees.name}_forest{trees_per_key}",
        train=buckets(trees.train, trees_per_key),
        val=buckets(trees.val, val_size),
        num_classes=trees.num_classes,
        meta={**trees.meta, "trees_per_key": trees_per_key},
    )
