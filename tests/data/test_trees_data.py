"""Sentiment trees: PTB parsing and errors, heap positions, vocab, the synthetic generator, the Dataset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from amp_notebook.data.sentiment import (
    CONTRAST_WORDS,
    INTENSIFIERS,
    NEGATORS,
    SENTIMENT_WORDS,
    sentiment_tree_dataset,
    synthetic_sentiment_trees,
)
from amp_notebook.data.trees import (
    MAX_DEPTH,
    Tree,
    TreeFormatError,
    Vocab,
    load_sst_file,
    parse_ptb_tree,
    tree_arrays,
    tree_to_ptb,
    trees_dataset,
)

EXAMPLE = "(3 (2 It) (4 (3 (2 is) (3 good)) (2 .)))"
CANONICAL = [
    EXAMPLE,
    "(2 word)",
    "(0 (1 (1 a) (2 b)) (0 (2 -LRB-) (0 (0 awful) (2 -RRB-))))",
    "(4 (4 (4 (4 w) (4 x)) (2 y)) (2 z))",
]


def test_parse_example() -> None:
    tree = parse_ptb_tree(EXAMPLE)
    assert tree.label == 3 and not tree.is_leaf
    assert tree.left == Tree.leaf(2, "It")
    assert tree.leaves() == ["It", "is", "good", "."]
    assert [n.label for n in tree.postorder()] == [2, 2, 3, 3, 2, 4, 3]
    assert tree.n_nodes == 7


@pytest.mark.parametrize("text", CANONICAL)
def test_round_trip_strings(text: str) -> None:
    assert tree_to_ptb(parse_ptb_tree(text)) == text


def test_parse_tolerates_whitespace() -> None:
    assert parse_ptb_tree("  (3(2 It)\t( 4 (2 is) (3 good) ) )\n") == parse_ptb_tree("(3 (2 It) (4 (2 is) (3 good)))")


def test_round_trip_synthetic_trees() -> None:
    for tree in synthetic_sentiment_trees(50, seed=3):
        assert parse_ptb_tree(tree_to_ptb(tree)) == tree


def test_unary_chains_collapse_to_inner_node() -> None:
    assert parse_ptb_tree("(2 (3 x))") == Tree.leaf(3, "x")
    assert parse_ptb_tree("(1 (0 (4 (2 a) (3 b))))") == Tree.branch(4, Tree.leaf(2, "a"), Tree.leaf(3, "b"))
    inner = parse_ptb_tree("(2 (1 (0 a)) (3 b))")
    assert inner == Tree.branch(2, Tree.leaf(0, "a"), Tree.leaf(3, "b"))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"label": 5, "word": "x"}, "0..4"),
        ({"label": 2}, "either a leaf"),
        ({"label": 2, "word": "x", "left": Tree.leaf(2, "y"), "right": Tree.leaf(2, "z")}, "either a leaf"),
        ({"label": 2, "left": Tree.leaf(2, "y")}, "either a leaf"),
        ({"label": 2, "word": "a b"}, "without whitespace"),
        ({"label": 2, "word": "(x"}, "-LRB-"),
    ],
)
def test_tree_constructor_rejects_bad_nodes(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Tree(**kwargs)  # type: ignore[arg-type]


# (bad line, column, message fragment)
MALFORMED = [
    ("(3 (2 a) (2 b)", 15, "never closed"),
    ("(3 (2 a) (2 b)))", 16, "extra ')'"),
    ("((2 a) (2 b))", 2, "missing label"),
    ("(x (2 a) (2 b))", 2, "integer label 0..4 after '(', found 'x'"),
    ("(2.5 a)", 2, "integer label"),
    ("(7 (2 a) (2 b))", 2, "label out of range"),
    ("(-1 a)", 2, "label out of range"),
    ("(2 (2 a) (2 b) (2 c))", 16, "3 children"),
    ("()", 1, "empty node '()'"),
    ("(2)", 1, "no word or subtrees"),
    ("(2 a b)", 4, "either one word"),
    ("(2 (1 a) b)", 10, "either one word"),
    ("2 a", 1, "expected '('"),
    ("(2 a) (3 b)", 7, "one tree per line"),
]


@pytest.mark.parametrize(("bad", "column", "fragment"), MALFORMED)
def test_load_sst_file_errors_name_file_line_and_column(tmp_path: Path, bad: str, column: int, fragment: str) -> None:
    path = tmp_path / "train.txt"
    path.write_text(f"{EXAMPLE}\n\n{bad}\n(2 ok)\n", encoding="utf-8")
    with pytest.raises(TreeFormatError) as info:
        load_sst_file(path)
    message = str(info.value)
    assert f"{path}, line 3, column {column}:" in message
    assert fragment in message
    assert (info.value.line, info.value.column) == (3, column)


def test_parse_string_errors_name_source() -> None:
    with pytest.raises(TreeFormatError, match=r"<string>, line 1, column 1: expected a tree"):
        parse_ptb_tree("   ")
    with pytest.raises(TreeFormatError, match=r"dev.txt, line 9, column 2"):
        parse_ptb_tree("(9 a)", source="dev.txt", line=9)


def test_load_sst_file_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "dev.txt"
    path.write_text("\n" + "\n  \n".join(CANONICAL) + "\n\n", encoding="utf-8")
    assert [tree_to_ptb(t) for t in load_sst_file(path)] == CANONICAL


def test_load_sst_file_rejects_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("(2 caf\xe9)\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt: expected UTF-8"):
        load_sst_file(path)


# ---------------------------------------------------------------------------------------------------------
# Positions


def test_tree_arrays_on_example() -> None:
    tree = parse_ptb_tree(EXAMPLE)
    vocab = Vocab(words=("<unk>", "is", "good"))
    arrays = tree_arrays(tree, vocab)
    assert arrays["positions"].tolist() == [2, 12, 13, 6, 7, 3, 1]
    assert arrays["labels"].tolist() == [2, 2, 3, 3, 2, 4, 3]
    assert arrays["is_leaf"].tolist() == [True, True, True, False, True, False, False]
    assert arrays["depth"].tolist() == [1, 3, 3, 2, 2, 1, 0]
    assert arrays["leaf_positions"].tolist() == [2, 12, 13, 7]
    assert arrays["leaf_words"].tolist() == [0, 1, 2, 0]  # "It" and "." are unknown
    assert [a.tolist() for a in arrays["positions_by_level"]] == [[12, 13], [6, 7], [2, 3], [1]]
    for key in ("positions", "labels", "depth", "leaf_positions", "leaf_words"):
        assert arrays[key].dtype == np.int64, key


def check_positions(tree: Tree, vocab: Vocab) -> None:
    arrays = tree_arrays(tree, vocab)
    positions = arrays["positions"].tolist()
    leaf = dict(zip(positions, arrays["is_leaf"].tolist(), strict=True))
    order = {p: i for i, p in enumerate(positions)}
    assert len(order) == len(positions) == tree.n_nodes, "positions must be distinct"
    assert positions[-1] == 1, "the root comes last in post-order"
    for p in positions:
        if p != 1:
            parent = p // 2
            assert parent in leaf and not leaf[parent], f"parent {parent} of {p} must be a branch"
            assert order[p] < order[parent], "children come before their parents"
        if not leaf[p]:
            assert 2 * p in leaf and 2 * p + 1 in leaf, f"branch {p} must have both children"
    assert arrays["depth"].tolist() == [p.bit_length() - 1 for p in positions]
    assert arrays["labels"].tolist() == [n.label for n in tree.postorder()]
    assert np.all((arrays["labels"] >= 0) & (arrays["labels"] <= 4))
    leaf_pos = arrays["leaf_positions"].tolist()
    assert leaf_pos == [p for p in positions if leaf[p]]
    # Leaves left to right: a leaf's heap path, read as bits after the leading 1, is its left-to-right rank.
    aligned = [p << (MAX_DEPTH - (p.bit_length() - 1)) for p in leaf_pos]
    assert aligned == sorted(aligned)
    assert arrays["leaf_words"].tolist() == [vocab.lookup(w) for w in tree.leaves()]
    levels = arrays["positions_by_level"]
    depths = [int(np.unique(np.array([p.bit_length() - 1 for p in lvl.tolist()]))[0]) for lvl in levels]
    assert depths == list(range(len(levels) - 1, -1, -1)), "levels deepest first"
    assert sorted(p for lvl in levels for p in lvl.tolist()) == sorted(positions)


def test_positions_parents_sides_and_post_order() -> None:
    trees = synthetic_sentiment_trees(200, seed=1)
    vocab = Vocab.from_trees(trees[:100])
    for tree in trees:
        check_positions(tree, vocab)


def test_side_is_position_parity() -> None:
    tree = parse_ptb_tree("(2 (1 (0 a) (2 b)) (3 c))")
    positions = tree_arrays(tree, Vocab.from_trees([tree]))["positions"].tolist()
    by_position = dict(zip(positions, tree.postorder(), strict=True))
    for p, node in by_position.items():
        if p == 1:
            continue
        parent = by_position[p // 2]
        assert node is (parent.right if p % 2 else parent.left)


def test_too_deep_tree_is_rejected() -> None:
    tree = Tree.leaf(2, "x")
    for _ in range(MAX_DEPTH + 1):
        tree = Tree.branch(2, tree, Tree.leaf(2, "y"))
    with pytest.raises(ValueError, match=r"depth exceeds 62"):
        tree_arrays(tree, Vocab.from_trees([tree]))
    shallower = tree.left
    assert shallower is not None
    deepest = tree_arrays(shallower, Vocab.from_trees([tree]))["positions_by_level"][0]
    assert deepest.tolist() == [2**MAX_DEPTH, 2**MAX_DEPTH + 1]  # the largest positions that fit in int64


def test_vocab() -> None:
    trees = [parse_ptb_tree("(2 (2 b) (2 (2 a) (2 b)))"), parse_ptb_tree("(2 (2 c) (2 a))")]
    vocab = Vocab.from_trees(trees)
    assert vocab.words == ("<unk>", "a", "b", "c")  # by count, ties alphabetical
    assert vocab.lookup("b") == 2 and vocab.lookup("zzz") == 0 and "c" in vocab and len(vocab) == 4
    assert Vocab.from_trees(trees, min_count=2).words == ("<unk>", "a", "b")
    with pytest.raises(ValueError, match="'<unk>' first"):
        Vocab(words=("a", "<unk>"))
    with pytest.raises(ValueError, match="duplicates"):
        Vocab(words=("<unk>", "a", "a"))


# ---------------------------------------------------------------------------------------------------------
# Synthetic generator


def reference_meaning(tree: Tree) -> tuple[str, int]:
    """Independent restatement of the composition rules: (kind, value)."""
    if tree.word is not None:
        if tree.word in SENTIMENT_WORDS:
            return "phrase", SENTIMENT_WORDS[tree.word]
        if tree.word in NEGATORS or tree.word in INTENSIFIERS:
            return "op", {**NEGATORS, **INTENSIFIERS}[tree.word]
        return ("but", 0) if tree.word in CONTRAST_WORDS else ("phrase", 0)
    assert tree.left is not None and tree.right is not None
    (lk, lv), (rk, rv) = reference_meaning(tree.left), reference_meaning(tree.right)

    def score(kind: str, value: int) -> int:
        return value if kind in ("phrase", "but-phrase") else 0

    def clip(x: int) -> int:
        return min(2, max(-2, x))

    match lk, rk:
        case "op", "op":
            return "op", lv * rv
        case "op", _:
            return "phrase", clip(lv * score(rk, rv))
        case _, "op":
            return "phrase", clip(rv * score(lk, lv))
        case "but", _:
            return "but-phrase", score(rk, rv)
        case _, "but-phrase":
            return "phrase", rv
    return "phrase", clip(score(lk, lv) + score(rk, rv))


def reference_label(tree: Tree) -> int:
    kind, value = reference_meaning(tree)
    return 2 + (value if kind in ("phrase", "but-phrase") else 0)


@pytest.mark.parametrize(
    ("text", "root"),
    [
        ("(2 (2 not) (3 good))", 1),
        ("(2 (2 very) (3 good))", 4),
        ("(2 (2 extremely) (1 bad))", 0),
        ("(2 (3 good) (2 (2 but) (1 dull)))", 1),  # the right part overrides
        ("(2 (0 awful) (2 (2 but) (2 plot)))", 2),
        ("(2 (2 (2 not) (2 very)) (3 good))", 0),  # "not very" multiplies to -2
        ("(2 (3 good) (4 great))", 4),  # sums are clipped to -2..+2
        ("(2 (1 bad) (3 good))", 2),
        ("(2 (2 never) (2 (2 the) (0 worst)))", 4),
    ],
)
def test_composition_on_hand_examples(text: str, root: int) -> None:
    tree = parse_ptb_tree(text)
    assert reference_label(tree) == root


def test_synthetic_labels_follow_composition_rules() -> None:
    for tree in synthetic_sentiment_trees(300, seed=5):
        for node in tree.postorder():
            assert node.label == reference_label(node), tree_to_ptb(tree)


def test_synthetic_is_deterministic_and_seeded() -> None:
    a = [tree_to_ptb(t) for t in synthetic_sentiment_trees(40, seed=11)]
    b = [tree_to_ptb(t) for t in synthetic_sentiment_trees(40, seed=11)]
    c = [tree_to_ptb(t) for t in synthetic_sentiment_trees(40, seed=12)]
    assert a == b and a != c


def test_synthetic_sizes_and_label_distribution() -> None:
    trees = synthetic_sentiment_trees(1000, seed=0, min_leaves=3, max_leaves=12)
    sizes = Counter(len(t.leaves()) for t in trees)
    assert min(sizes) == 3 and max(sizes) == 12
    roots = Counter(t.label for t in trees)
    assert set(roots) == {0, 1, 2, 3, 4}
    assert all(roots[c] >= 50 for c in range(5)), roots  # every class >= 5% at the root
    assert roots[2] <= 400, roots  # a majority-class guess gets < 40%
    nodes = Counter(n.label for t in trees for n in t.postorder())
    assert sum(nodes[c] for c in (0, 1, 3, 4)) >= 0.3 * sum(nodes.values())


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"n": -1}, "n: expected"), ({"n": 2, "min_leaves": 0}, "min_leaves"), ({"n": 2, "max_leaves": 2}, "max_leaves")],
)
def test_synthetic_rejects_bad_arguments(kwargs: dict[str, int], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        synthetic_sentiment_trees(**kwargs)


# ---------------------------------------------------------------------------------------------------------
# Dataset


def test_sentiment_tree_dataset() -> None:
    ds = sentiment_tree_dataset(n_train=60, n_val=20, seed=4)
    assert (len(ds.train), len(ds.val), ds.num_classes) == (60, 20, 5)
    assert ds.meta["num_classes"] == 5 and ds.meta["vocab"][0] == "<unk>"
    assert ds.meta["vocab_size"] == len(ds.meta["vocab"])
    vocab = Vocab(words=tuple(ds.meta["vocab"]))
    for batch in ds.train + ds.val:
        x = batch.inputs
        assert batch.size == 1
        assert set(x) == {"leaf_words", "leaf_positions", "positions", "labels", "is_leaf", "leaf_table", "label_table"}
        assert x["leaf_table"].tolist() == np.column_stack([x["leaf_positions"], x["leaf_words"]]).tolist()
        assert x["label_table"].tolist() == np.column_stack([x["positions"], x["labels"]]).tolist()
        for key in ("leaf_words", "leaf_positions", "positions", "labels", "leaf_table", "label_table"):
            assert x[key].dtype == np.int64, key
        assert x["is_leaf"].dtype == bool
        assert batch.fields == {"n_nodes": x["positions"].size, "n_leaves": x["leaf_positions"].size}
        assert x["positions"].size == 2 * x["leaf_positions"].size - 1  # binary tree
        assert x["labels"].shape == x["positions"].shape == x["is_leaf"].shape
        assert x["leaf_positions"].tolist() == x["positions"][x["is_leaf"]].tolist()
        assert np.all((x["leaf_words"] >= 0) & (x["leaf_words"] < len(vocab)))
    again = sentiment_tree_dataset(n_train=60, n_val=20, seed=4)
    assert all(np.array_equal(a.inputs["labels"], b.inputs["labels"]) for a, b in zip(ds.val, again.val, strict=True))


def test_trees_dataset_from_sst_file(tmp_path: Path) -> None:
    path = tmp_path / "train.txt"
    path.write_text("\n".join(CANONICAL) + "\n", encoding="utf-8")
    trees = load_sst_file(path)
    ds = trees_dataset(trees[:3], trees[3:])
    words = ds.meta["vocab"]
    assert words[0] == "<unk>"
    first = ds.train[0].inputs
    assert [words[i] for i in first["leaf_words"].tolist()] == ["It", "is", "good", "."]
    assert ds.val[0].inputs["leaf_words"].tolist() == [0, 0, 0, 0]  # w, x, y, z unseen in training
    with pytest.raises(ValueError, match="at least one training tree"):
        trees_dataset([], trees)
