"""Synthetic named-entity sentences: the embedded default data of the BiLSTM tagger.

A made-up language with the statistics that make the DyNet tagger's design matter:

* **A Zipfian vocabulary.** Lowercase "other" words (tag ``O``) and entity names are drawn with Zipfian
  probabilities (rank r has weight ``1 / r ** ZIPF_EXPONENT``), so a few words are very frequent and most
  are rare: with the default sizes about a fifth of the training tokens are words seen 5 times or fewer,
  and validation holds words never seen in training. Those can only be tagged from their spelling, by the
  character model.
* **Entity spans with IOB tags.** Four types as in Wikiner (PER, LOC, ORG, MISC). A span is one to three
  capitalised names; its first token is tagged ``B-TYPE``, the rest ``I-TYPE``. Each type spells its names
  with its own endings (persons' surnames end in -son, -ov, ..., places in -burg, -ville, ..., companies
  in -corp, -tech, ..., adjectives of nationality in -ian, -ese, ...), and a cue word often precedes a
  span ("mr" before a person, "in" before a place, ...), so a tag follows from a word's characters and its
  context.

Every random choice comes from one ``numpy.random.Generator`` seeded by ``seed``: the same seed gives the
same lexicon and sentences. Training and validation sentences share the lexicon and are drawn one after
the other.
"""

from __future__ import annotations

import numpy as np

from amp_notebook.data.batch import check_count
from amp_notebook.data.ner import Sentence

ZIPF_EXPONENT = 1.1
ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "kl", "gr")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
ENDINGS: dict[str, tuple[str, ...]] = {
    "PER": ("son", "ov", "ez", "ski", "ani", "berg"),
    "LOC": ("burg", "ville", "stan", "ford", "mouth", "ia"),
    "ORG": ("corp", "tech", "soft", "bank", "tel", "works"),
    "MISC": ("ian", "ese", "ish", "ic"),
}
CUES: dict[str, tuple[str, ...]] = {
    "PER": ("mr", "mrs", "dr", "said"),
    "LOC": ("in", "at", "near", "from"),
    "ORG": ("by", "joined", "with"),
    "MISC": ("the", "a"),
}
TYPE_WEIGHTS = {"PER": 0.3, "LOC": 0.3, "ORG": 0.25, "MISC": 0.15}
SPAN_LENGTHS = {"PER": (1, 2, 2, 3), "LOC": (1, 1, 2), "ORG": (1, 2, 2, 3), "MISC": (1,)}
N_OTHER_WORDS, N_NAMES_PER_TYPE, N_FIRST_NAMES = 2500, 400, 150
MIN_WORDS, MAX_WORDS = 5, 20
ENTITY_RATE = 0.25  # chance that the next segment of a sentence is an entity span


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _word(rng: np.random.Generator, syllables: int) -> str:
    return "".join(_pick(rng, ONSETS) + _pick(rng, VOWELS) for _ in range(syllables))


def _distinct(rng: np.random.Generator, n: int, make: object, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = make()  # type: ignore[operator]
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def _zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** ZIPF_EXPONENT
    return weights / weights.sum()


class _Draws:
    """Zipf-weighted draws from a list, taken from the generator in blocks (one numpy call per block, not
    per word); the order of draws, and so every sentence, depends only on the seed."""

    BLOCK = 4096

    def __init__(self, rng: np.random.Generator, items: list[str]) -> None:
        self.rng, self.items, self.p = rng, items, _zipf(len(items))
        self.block: list[int] = []

    def __call__(self) -> str:
        if not self.block:
            self.block = self.rng.choice(len(self.items), size=self.BLOCK, p=self.p).tolist()[::-1]
        return self.items[self.block.pop()]


class _Lexicon:
    """The made-up language: other words, first names and each type's names, each drawn Zipf-weighted."""

    def __init__(self, rng: np.random.Generator) -> None:
        taken: set[str] = {c for cues in CUES.values() for c in cues}
        other = _distinct(rng, N_OTHER_WORDS, lambda: _word(rng, int(rng.integers(1, 4))), taken)
        first = _distinct(rng, N_FIRST_NAMES, lambda: _word(rng, int(rng.integers(1, 3))).capitalize(), taken)
        self.other_word, self.first_name = _Draws(rng, other), _Draws(rng, first)
        self.names: dict[str, _Draws] = {}
        for kind, endings in ENDINGS.items():
            names = _distinct(
                rng,
                N_NAMES_PER_TYPE,
                lambda endings=endings: (_word(rng, int(rng.integers(1, 3))) + _pick(rng, endings)).capitalize(),
                taken,
            )
            self.names[kind] = _Draws(rng, names)
        self.kinds = list(TYPE_WEIGHTS)
        self.kind_bounds = np.cumsum([TYPE_WEIGHTS[k] for k in self.kinds]).tolist()

    def kind(self, u: float) -> str:
        """The entity type for a uniform draw ``u`` in [0, 1)."""
        return next((k for k, bound in zip(self.kinds, self.kind_bounds, strict=True) if u < bound), self.kinds[-1])

    def span(self, rng: np.random.Generator, kind: str) -> list[str]:
        lengths = SPAN_LENGTHS[kind]
        length = lengths[int(rng.integers(len(lengths)))]
        if kind == "PER" and length > 1:  # a person: first name(s), then a surname
            return [self.first_name() for _ in range(length - 1)] + [self.names[kind]()]
        return [self.names[kind]() for _ in range(length)]


def _sentence(rng: np.random.Generator, lexicon: _Lexicon) -> Sentence:
    target = int(rng.integers(MIN_WORDS, MAX_WORDS + 1))
    tokens: list[str] = []
    tags: list[str] = []
    while len(tokens) < target:
        # an entity span never follows another directly, so B- marks the start of every span
        after_entity = bool(tags) and tags[-1] != "O"
        u = rng.random(3)
        if not after_entity and u[0] < ENTITY_RATE:
            kind = lexicon.kind(float(u[1]))
            if u[2] < 0.5:
                tokens.append(_pick(rng, CUES[kind]))
                tags.append("O")
            names = lexicon.span(rng, kind)
            tokens += names
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(names) - 1)
        else:
            tokens.append(lexicon.other_word())
            tags.append("O")
    return Sentence(tuple(tokens), tuple(tags))


def synthetic_ner_sentences(n_train: int, n_val: int, seed: int = 0) -> tuple[list[Sentence], list[Sentence]]:
    """``n_train`` training and ``n_val`` validation sentences of one made-up language (module doc)."""
    check_count("n_train", n_train, 1)
    check_count("n_val", n_val, 0)
    rng = np.random.default_rng(seed)
    lexicon = _Lexicon(rng)
    train = [_sentence(rng, lexicon) for _ in range(n_train)]
    val = [_sentence(rng, lexicon) for _ in range(n_val)]
    return train, val
