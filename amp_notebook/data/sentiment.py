"""Synthetic compositional sentiment trees: the embedded default data of the Tree-LSTM experiments.

Sentences are random bracketings over a small lexicon of words with polarity, neutral words, negators,
intensifiers and contrast words; every node's label (0..4) is composed from its children by the rules in
`synthetic_sentiment_trees`, so labels are learnable and exact. Trees are `amp_notebook.data.trees.Tree`s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from amp_notebook.data.batch import Dataset, check_count
from amp_notebook.data.trees import NEUTRAL, Tree, trees_dataset

SENTIMENT_WORDS: dict[str, int] = {
    "awful": -2, "terrible": -2, "dreadful": -2, "worst": -2,
    "bad": -1, "dull": -1, "boring": -1, "weak": -1, "messy": -1,
    "good": 1, "fun": 1, "nice": 1, "solid": 1, "charming": 1,
    "great": 2, "brilliant": 2, "superb": 2, "best": 2,
}  # fmt: skip
NEUTRAL_WORDS: tuple[str, ...] = (
    "the", "a", "this", "movie", "film", "plot", "story", "script", "cast", "ending", "it", "is", "was",
    "and", "with", "of", "director", "music", "scenes", ".",
)  # fmt: skip
NEGATORS: dict[str, int] = {"not": -1, "never": -1}
INTENSIFIERS: dict[str, int] = {"very": 2, "really": 2, "extremely": 3}
CONTRAST_WORDS: tuple[str, ...] = ("but",)


class _Role(Enum):
    PHRASE = "phrase"  # carries a sentiment score
    OPERATOR = "operator"  # a multiplier waiting for its sibling phrase ("not", "very", "not very")
    CONTRAST = "contrast"  # the bare contrast word "but"
    CONTRASTED = "contrasted"  # "but X": overrides a phrase on its left


def _clip(score: int) -> int:
    return max(-2, min(2, score))


def _word_meaning(word: str) -> tuple[_Role, int]:
    if word in SENTIMENT_WORDS:
        return _Role.PHRASE, SENTIMENT_WORDS[word]
    if word in NEGATORS:
        return _Role.OPERATOR, NEGATORS[word]
    if word in INTENSIFIERS:
        return _Role.OPERATOR, INTENSIFIERS[word]
    if word in CONTRAST_WORDS:
        return _Role.CONTRAST, 0
    return _Role.PHRASE, 0


def _as_score(role: _Role, value: int) -> int:
    return value if role in (_Role.PHRASE, _Role.CONTRASTED) else 0


def _compose(left: tuple[_Role, int], right: tuple[_Role, int]) -> tuple[_Role, int]:
    (lrole, lval), (rrole, rval) = left, right
    if lrole is _Role.OPERATOR and rrole is _Role.OPERATOR:
        return _Role.OPERATOR, lval * rval
    if lrole is _Role.OPERATOR:
        return _Role.PHRASE, _clip(lval * _as_score(rrole, rval))
    if rrole is _Role.OPERATOR:
        return _Role.PHRASE, _clip(rval * _as_score(lrole, lval))
    if lrole is _Role.CONTRAST:
        return _Role.CONTRASTED, _as_score(rrole, rval)
    if rrole is _Role.CONTRASTED:
        return _Role.PHRASE, rval
    return _Role.PHRASE, _clip(_as_score(lrole, lval) + _as_score(rrole, rval))


@dataclass
class _Shape:
    """A tree of words before labelling: a word or a (left, right) pair."""

    word: str | None = None
    left: _Shape | None = None
    right: _Shape | None = None


def _label(shape: _Shape) -> tuple[Tree, tuple[_Role, int]]:
    if shape.word is not None:
        meaning = _word_meaning(shape.word)
        return Tree(label=NEUTRAL + _as_score(*meaning), word=shape.word), meaning
    assert shape.left is not None and shape.right is not None
    left, lmeaning = _label(shape.left)
    right, rmeaning = _label(shape.right)
    meaning = _compose(lmeaning, rmeaning)
    return Tree(label=NEUTRAL + _as_score(*meaning), left=left, right=right), meaning


def _pick(rng: np.random.Generator, words: Sequence[str]) -> str:
    return words[int(rng.integers(len(words)))]


def _phrase(n: int, rng: np.random.Generator) -> _Shape:
    if n == 1:
        pool = list(SENTIMENT_WORDS) if rng.random() < 0.45 else NEUTRAL_WORDS
        return _Shape(word=_pick(rng, pool))
    r = rng.random()
    if r < 0.15:
        return _Shape(left=_Shape(word=_pick(rng, list(NEGATORS))), right=_phrase(n - 1, rng))
    if r < 0.27:
        return _Shape(left=_Shape(word=_pick(rng, list(INTENSIFIERS))), right=_phrase(n - 1, rng))
    if n >= 4 and r < 0.37:
        k = int(rng.integers(1, n - 1))
        but = _Shape(left=_Shape(word=_pick(rng, CONTRAST_WORDS)), right=_phrase(n - 1 - k, rng))
        return _Shape(left=_phrase(k, rng), right=but)
    k = int(rng.integers(1, n))
    return _Shape(left=_phrase(k, rng), right=_phrase(n - k, rng))


def _synthetic(n: int, rng: np.random.Generator, min_leaves: int, max_leaves: int) -> list[Tree]:
    sizes = rng.integers(min_leaves, max_leaves + 1, size=n)
    return [_label(_phrase(int(size), rng))[0] for size in sizes]


def synthetic_sentiment_trees(n: int, seed: int = 0, min_leaves: int = 3, max_leaves: int = 12) -> list[Tree]:
    """`n` random sentiment trees with compositional labels (deterministic given `seed`).

    Sentences have `min_leaves..max_leaves` words (uniform), bracketed at random top-down: a phrase of `k > 1`
    words is "negator + phrase(k-1)" (p = 0.15), "intensifier + phrase(k-1)" (p = 0.12), "phrase(j) +
    (but + phrase(k-1-j))" (p = 0.10, k >= 4) or a uniformly random split. A single word is a sentiment
    word with p = 0.45, else a neutral word.

    Every node has a meaning (role, value); a word's meaning comes from the lexicon:

    - sentiment words (`SENTIMENT_WORDS`): a phrase with score -2..+2; neutral words: a phrase with score 0;
    - negators (`NEGATORS`, multiplier -1) and intensifiers (`INTENSIFIERS`, multiplier 2 or 3): operators;
    - "but" (`CONTRAST_WORDS`): a contrast marker.

    A branch (left, right) composes, first matching rule wins (clip = clamp to -2..+2):

    1. operator, operator -> operator with the product of the multipliers ("not very" = -2);
    2. operator, X -> phrase clip(multiplier * score(X)): negation flips its sibling, intensifiers scale;
       (X, operator symmetrically);
    3. contrast, X -> contrasted phrase with score(X) ("but X");
    4. X, contrasted Y -> phrase score(Y): the right part of "X but Y" overrides the left;
    5. X, Y -> phrase clip(score(X) + score(Y)).

    score() of a phrase or contrasted phrase is its value, of an operator or contrast marker 0. The label of
    every node is `2 + score`: 0 very negative .. 4 very positive; operators and "but" alone are neutral.
    Because node scores are clipped, a node's label determines the score its parent composes with.
    """
    check_count("n", n, 0)
    check_count("min_leaves", min_leaves, 1)
    check_count("max_leaves", max_leaves, min_leaves)
    return _synthetic(n, np.random.default_rng(seed), min_leaves, max_leaves)


def sentiment_tree_dataset(n_train: int = 2000, n_val: int = 500, seed: int = 0) -> Dataset:
    """Synthetic sentiment trees as keys of one tree each (see `trees_dataset`, `synthetic_sentiment_trees`).

    Each key holds `leaf_words`, `leaf_positions`, `positions`, `labels` (int64) and `is_leaf` (bool), nodes in
    post-order, with `size = 1` and fields `n_nodes`, `n_leaves`. Train and validation come from independent
    streams derived from `seed`.
    """
    check_count("n_train", n_train, 1)
    check_count("n_val", n_val, 0)
    train_seq, val_seq = np.random.SeedSequence(seed).spawn(2)
    train = _synthetic(n_train, np.random.default_rng(train_seq), 3, 12)
    val = _synthetic(n_val, np.random.default_rng(val_seq), 3, 12)
    return trees_dataset(train, val, name="synthetic_sentiment_trees")
