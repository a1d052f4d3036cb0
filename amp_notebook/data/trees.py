"""Binary sentiment trees (Stanford Sentiment Treebank format) for the Tree-LSTM experiments.

Data
----
An instance is a binary constituency tree over a sentence with a sentiment label in 0..4 (very negative,
negative, neutral, positive, very positive) at *every* node, as in the Stanford Sentiment Treebank (SST).
SST ships one tree per line in PTB bracket notation::

    (3 (2 It) (4 (3 (2 is) (3 good)) (2 .)))

i.e. `(label word)` for a leaf and `(label left right)` for a branch. A unary chain such as `(2 (3 x))` (a
node with a single subtree) is collapsed onto the inner node, keeping the *inner* label: both nodes span
exactly the same words, the inner one is the node that remains in the binary tree, and the Tree-LSTM has no
unary cell. SST's released trees are already strictly binary, so this only matters for other treebanks.

Node addresses
--------------
Nodes are addressed by heap positions: the root is 1, the left child of `p` is `2p` and the right child is
`2p + 1`, so the parent of `p` is `p // 2` and `p % 2` says which side (0 left, 1 right) it hangs on. This is
how the IR's state addresses tree nodes. Positions are int64, so trees deeper than `MAX_DEPTH` (62) are
rejected by `tree_arrays`. Arrays list nodes in post-order (left subtree, right subtree, node): every child
comes before its parent.

Embedded default
----------------
`amp_notebook.data.sentiment.synthetic_sentiment_trees` generates compositional sentiment trees (rules in
its docstring), so the models train without any download. Real SST files (`train.txt`, `dev.txt`, ...)
load with `load_sst_file` and become a `Dataset` with `trees_dataset`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import DataFormatError, DataTypeError, SettingError

NUM_CLASSES = 5
NEUTRAL = 2
UNK = "<unk>"
MAX_DEPTH = 62

# ---------------------------------------------------------------------------------------------------------
# Trees


@dataclass(frozen=True)
class Tree:
    """A binary tree node: a leaf (`word`) or a branch (`left`, `right`), with a sentiment `label` in 0..4."""

    label: int
    word: str | None = None
    left: Tree | None = None
    right: Tree | None = None

    def __post_init__(self) -> None:
        if isinstance(self.label, bool) or not isinstance(self.label, (int, np.integer)):
            raise DataTypeError(f"Tree.label: expected an int in 0..{NUM_CLASSES - 1}, got {self.label!r}")
        if not 0 <= self.label < NUM_CLASSES:
            raise DataFormatError(f"Tree.label: expected a sentiment label in 0..{NUM_CLASSES - 1}, got {self.label}")
        is_leaf = self.word is not None
        has_children = self.left is not None or self.right is not None
        if is_leaf == has_children or (has_children and (self.left is None or self.right is None)):
            raise DataFormatError(
                "Tree: expected either a leaf (word set, no children) or a branch (left and right set, no word), "
                f"got word={self.word!r}, left={'set' if self.left else None}, right={'set' if self.right else None}"
            )
        if self.word is not None and (not self.word or re.search(r"[\s()]", self.word)):
            raise DataFormatError(
                f"Tree.word: expected a non-empty token without whitespace or parentheses (write '(' as -LRB- "
                f"and ')' as -RRB-, as SST does), got {self.word!r}"
            )

    @staticmethod
    def leaf(label: int, word: str) -> Tree:
        return Tree(label=label, word=word)

    @staticmethod
    def branch(label: int, left: Tree, right: Tree) -> Tree:
        return Tree(label=label, left=left, right=right)

    @property
    def is_leaf(self) -> bool:
        return self.word is not None

    def postorder(self) -> Iterator[Tree]:
        """Nodes in post-order (left subtree, right subtree, node), without recursion."""
        stack: list[tuple[Tree, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node.word is not None or expanded:
                yield node
                continue
            assert node.left is not None and node.right is not None
            stack.extend(((node, True), (node.right, False), (node.left, False)))

    def leaves(self) -> list[str]:
        """The sentence: leaf words left to right."""
        return [node.word for node in self.postorder() if node.word is not None]

    @property
    def n_nodes(self) -> int:
        return sum(1 for _ in self.postorder())


# ---------------------------------------------------------------------------------------------------------
# PTB bracket format

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeFormatError(DataFormatError):
    """A malformed PTB tree; the message names the source, line and column (1-based)."""

    def __init__(self, source: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{source}, line {line}, column {column}: {message}")
        self.source = source
        self.line = line
        self.column = column


@dataclass(frozen=True)
class _Token:
    text: str
    column: int


class _Parser:
    """Recursive-descent parser for one PTB line: node := '(' label (word | node node) ')'."""

    def __init__(self, text: str, source: str, line: int) -> None:
        self.tokens = [_Token(m.group(), m.start() + 1) for m in _TOKEN.finditer(text)]
        self.end_column = len(text.rstrip("\r\n")) + 1
        self.source = source
        self.line = line
        self.i = 0

    def error(self, column: int, message: str) -> TreeFormatError:
        return TreeFormatError(self.source, self.line, column, message)

    def parse(self) -> Tree:
        if not self.tokens:
            raise self.error(1, "expected a tree such as '(2 word)', found an empty line")
        first = self.tokens[0]
        if first.text != "(":
            raise self.error(first.column, f"expected '(' to open the tree, found {first.text!r}")
        tree = self.node()
        if self.i < len(self.tokens):
            extra = self.tokens[self.i]
            if extra.text == ")":
                raise self.error(
                    extra.column,
                    "unbalanced parentheses: expected end of line after the tree, found an extra ')'; "
                    "remove it (there are more ')' than '(')",
                )
            raise self.error(
                extra.column,
                f"expected end of line after the tree, found {extra.text!r}; the file holds one tree per line",
            )
        return tree

    def node(self) -> Tree:
        opening = self.tokens[self.i]
        self.i += 1
        label = self.label(opening)
        children: list[tuple[Tree | str, _Token]] = []
        while True:
            if self.i >= len(self.tokens):
                raise self.error(
                    self.end_column,
                    f"unbalanced parentheses: the '(' at column {opening.column} is never closed (found end of "
                    "line); add the missing ')'",
                )
            token = self.tokens[self.i]
            if token.text == ")":
                self.i += 1
                break
            if token.text == "(":
                children.append((self.node(), token))
            else:
                children.append((token.text, token))
                self.i += 1
        return self.build(opening, label, children)

    def label(self, opening: _Token) -> int:
        if self.i >= len(self.tokens):
            raise self.error(
                self.end_column,
                f"unbalanced parentheses: the '(' at column {opening.column} is never closed (found end of line)",
            )
        token = self.tokens[self.i]
        if token.text == ")":
            raise self.error(
                opening.column,
                "empty node '()': expected a label 0..4 followed by a word or two subtrees, found nothing",
            )
        if token.text == "(":
            raise self.error(
                token.column,
                f"missing label: expected an integer label 0..4 after the '(' at column {opening.column}, "
                "found '('; write '(label (...) (...))'",
            )
        try:
            label = int(token.text)
        except ValueError:
            raise self.error(token.column, f"expected an integer label 0..4 after '(', found {token.text!r}") from None
        if not 0 <= label < NUM_CLASSES:
            raise self.error(
                token.column,
                f"label out of range: expected a sentiment label in 0..{NUM_CLASSES - 1}, found {label}",
            )
        self.i += 1
        return label

    def build(self, opening: _Token, label: int, children: list[tuple[Tree | str, _Token]]) -> Tree:
        if not children:
            raise self.error(
                opening.column,
                f"node '({label})' has a label but no word or subtrees: expected '({label} word)' or "
                f"'({label} (...) (...))'",
            )
        if len(children) >= 3:
            third = children[2][1]
            raise self.error(
                third.column,
                f"the node opened at column {opening.column} has {len(children)} children: expected a binary tree "
                "(one word or two subtrees); binarize the tree first",
            )
        words = [tok for child, tok in children if isinstance(child, str)]
        if len(children) == 2 and words:
            raise self.error(
                words[0].column,
                f"the node opened at column {opening.column} has {len(children)} children including the word "
                f"{words[0].text!r}: expected either one word (a leaf) or two subtrees (a branch); wrap each "
                "word in its own '(label word)'",
            )
        if len(children) == 1:
            only = children[0][0]
            if isinstance(only, str):
                return Tree(label=label, word=only)
            return only  # unary chain: collapse onto the inner node, keeping its label
        left, right = children[0][0], children[1][0]
        assert isinstance(left, Tree) and isinstance(right, Tree)
        return Tree(label=label, left=left, right=right)


def parse_ptb_tree(text: str, *, source: str = "<string>", line: int = 1) -> Tree:
    """Parse one PTB-style sentiment tree such as `(3 (2 It) (4 (2 is) (3 good)))`.

    Unary chains `(a (b ...))` collapse to the inner node (label `b`). Raises `TreeFormatError` naming
    `source`, `line` and the column where parsing failed.
    """
    return _Parser(text, source, line).parse()


def tree_to_ptb(tree: Tree) -> str:
    """The PTB bracket string of `tree`; `parse_ptb_tree(tree_to_ptb(t)) == t`."""
    parts: list[str] = []
    stack: list[Tree | str] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif item.word is not None:
            parts.append(f"({item.label} {item.word})")
        else:
            assert item.left is not None and item.right is not None
            stack.extend((")", item.right, " ", item.left, f"({item.label} "))
    return "".join(parts)


def load_sst_file(path: str | Path) -> list[Tree]:
    """One tree per line (UTF-8; blank lines skipped), e.g. SST's `train.txt`.

    Errors name the file, the line number and the column of the offending token.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{path}: expected UTF-8 text (one PTB tree per line), but decoding failed ({exc})"
        ) from exc
    return [
        parse_ptb_tree(line, source=str(path), line=number)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


# ---------------------------------------------------------------------------------------------------------
# Vocabulary and arrays


@dataclass(frozen=True)
class Vocab:
    """Word ids: `words[i]` has id `i`; id 0 is `"<unk>"`, which every unknown word maps to."""

    words: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.words or self.words[0] != UNK:
            raise DataFormatError(f"Vocab.words: expected {UNK!r} first (id 0), got {self.words[:1]}")
        index = {word: i for i, word in enumerate(self.words)}
        if len(index) != len(self.words):
            duplicates = sorted(w for w, c in Counter(self.words).items() if c > 1)
            raise DataFormatError(f"Vocab.words: expected distinct words, found duplicates {duplicates[:10]}")
        object.__setattr__(self, "index", index)

    @staticmethod
    def from_trees(trees: Iterable[Tree], min_count: int = 1) -> Vocab:
        """Words seen at least `min_count` times, most frequent first (ties alphabetical)."""
        counts = Counter(word for tree in trees for word in tree.leaves())
        counts.pop(UNK, None)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        return Vocab(words=(UNK, *kept))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def lookup(self, word: str) -> int:
        return self.index.get(word, 0)

    def encode(self, words: Iterable[str]) -> np.ndarray:
        return np.array([self.lookup(w) for w in words], dtype=np.int64)


class TreeArrays(TypedDict):
    """Arrays of one tree; nodes in post-order (children before parents)."""

    positions: np.ndarray  # int64 (n_nodes,): heap positions
    labels: np.ndarray  # int64 (n_nodes,)
    is_leaf: np.ndarray  # bool (n_nodes,)
    depth: np.ndarray  # int64 (n_nodes,): root 0
    leaf_positions: np.ndarray  # int64 (n_leaves,), left to right
    leaf_words: np.ndarray  # int64 (n_leaves,): vocab ids
    positions_by_level: list[np.ndarray]  # int64 arrays, deepest level first, left to right within a level


def tree_arrays(tree: Tree, vocab: Vocab) -> TreeArrays:
    """Heap positions (root 1, children 2p and 2p+1), labels, leaves and levels of `tree`, in post-order."""
    positions: list[int] = []
    labels: list[int] = []
    leaf: list[bool] = []
    depths: list[int] = []
    words: list[str] = []
    stack: list[tuple[Tree, int, int, bool]] = [(tree, 1, 0, False)]
    while stack:
        node, pos, depth, expanded = stack.pop()
        if depth > MAX_DEPTH:
            raise DataFormatError(
                f"tree_arrays: tree depth exceeds {MAX_DEPTH}: heap positions 2**depth would overflow int64; "
                "rebalance or drop this tree"
            )
        if node.word is None and not expanded:
            assert node.left is not None and node.right is not None
            stack.extend(((node, pos, depth, True), (node.right, 2 * pos + 1, depth + 1, False)))
            stack.append((node.left, 2 * pos, depth + 1, False))
            continue
        positions.append(pos)
        labels.append(node.label)
        leaf.append(node.word is not None)
        depths.append(depth)
        if node.word is not None:
            words.append(node.word)
    pos_arr = np.array(positions, dtype=np.int64)
    depth_arr = np.array(depths, dtype=np.int64)
    leaf_arr = np.array(leaf, dtype=bool)
    return TreeArrays(
        positions=pos_arr,
        labels=np.array(labels, dtype=np.int64),
        is_leaf=leaf_arr,
        depth=depth_arr,
        leaf_positions=pos_arr[leaf_arr],
        leaf_words=vocab.encode(words),
        positions_by_level=[pos_arr[depth_arr == d] for d in range(int(depth_arr.max()), -1, -1)],
    )


def tree_batch(tree: Tree, vocab: Vocab) -> Batch:
    """One tree as one key: inputs `leaf_words`, `leaf_positions`, `positions`, `labels`, `is_leaf`, and the
    two tables the Tree-LSTM graph flatmaps: `leaf_table` (n_leaves, 2) = [heap position, word id] and
    `label_table` (n_nodes, 2) = [heap position, label] (int64)."""
    arrays = tree_arrays(tree, vocab)
    return Batch(
        inputs={
            "leaf_words": arrays["leaf_words"],
            "leaf_positions": arrays["leaf_positions"],
            "positions": arrays["positions"],
            "labels": arrays["labels"],
            "is_leaf": arrays["is_leaf"],
            "leaf_table": np.column_stack([arrays["leaf_positions"], arrays["leaf_words"]]),
            "label_table": np.column_stack([arrays["positions"], arrays["labels"]]),
        },
        size=1,
        fields={"n_nodes": int(arrays["positions"].size), "n_leaves": int(arrays["leaf_positions"].size)},
    )


def trees_dataset(
    train: Sequence[Tree], val: Sequence[Tree], vocab: Vocab | None = None, name: str = "sentiment_trees"
) -> Dataset:
    """One key per tree (the paper trains the Tree-LSTM without batching); vocab built from `train` if None."""
    if not train:
        raise SettingError("train", "trees_dataset: expected at least one training tree, got none")
    vocab = Vocab.from_trees(train) if vocab is None else vocab
    return Dataset(
        name=name,
        train=[tree_batch(t, vocab) for t in train],
        val=[tree_batch(t, vocab) for t in val],
        num_classes=NUM_CLASSES,
        meta={"vocab": list(vocab.words), "vocab_size": len(vocab), "num_classes": NUM_CLASSES},
    )
