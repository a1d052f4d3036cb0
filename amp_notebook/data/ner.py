"""Named-entity tagging data for the BiLSTM tagger: sentences, the word/character vocabulary, keys, CoNLL files.

A sentence is a list of tokens with one IOB tag each (``O``, ``B-PER``, ``I-PER``, ...). The tagger
(``models.bilstm_tagger``, the DyNet benchmark model the AMPNet paper ran on Wikiner) represents a word
that occurs more than ``threshold`` (5) times in the training sentences by a learned word embedding, and
every other word (rare, or unseen in training) by a character-level BiLSTM over its characters, bracketed
by the pad character ``<*>`` as DyNet's benchmark does. :class:`NerVocab` makes that split once, from the
training sentences.

What a key holds
----------------
A key is one sentence (the paper's layout) or a bucket of ``B`` sentences of equal length ``n``. Word
``b`` of a bucket at position ``t`` is word number ``w = t * B + b`` (time-major), and its *ids* are one
frequent-word id, or its bracketed character ids (at least 3). Inputs::

    words  (total ids, 2) int   rows [w, id]: one row per id, the rows of word w together
    tags   (n * B,)      int    tag ids, time-major (row w is word w)
    fields length = n, bucket = B;   Batch.size = B sentences

The graph partitions ``words`` by ``w`` (one message per word, its id count in the state as ``ids``) and
sends one-id words to the word embedding and longer ones to the character BiLSTM: the Distribute of the
paper, decided by the data's frequency split.

Data
----
* :func:`synthetic_ner_dataset` (the embedded default; ``data/ner_synthetic.py``): a Zipfian vocabulary
  (so rare words exist), entity spans with IOB tags whose names carry type-specific spelling, deterministic
  by seed.
* :func:`load_conll`: CoNLL-style files, one ``token tag`` per line (more columns allowed: the first is the
  token, the last the tag, as in CoNLL-2003), a blank line between sentences, ``-DOCSTART-`` lines
  skipped. Errors name the file and the line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from amp_notebook.data.batch import Batch, Dataset, check_count
from amp_notebook.errors import DataFileNotFoundError, DataFormatError, SettingError

PAD_CHAR = "<*>"  # brackets every rare word's characters (DyNet's benchmark); char id 0
UNK_CHAR = "<unk>"  # a character never seen in training; char id 1
FREQUENT_THRESHOLD = 5  # a word is frequent when seen MORE than this many times in training
TAG_PATTERN = re.compile(r"O|[BIES]-\S+")


class ConllFormatError(DataFormatError):
    """A malformed CoNLL-style file; the message names the file and the line (1-based)."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}, line {line}: {message}")
        self.source = source
        self.line = line


@dataclass(frozen=True)
class Sentence:
    """Tokens and their tags (equal lengths, at least one token)."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tokens or len(self.tokens) != len(self.tags):
            raise DataFormatError(
                f"Sentence: expected one tag per token and at least one token, got {len(self.tokens)} tokens and "
                f"{len(self.tags)} tags"
            )

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class NerVocab:
    """Frequent words (id = index), characters (``<*>`` = 0, ``<unk>`` = 1) and tags (``O`` first)."""

    words: tuple[str, ...]
    chars: tuple[str, ...]
    tags: tuple[str, ...]
    threshold: int = FREQUENT_THRESHOLD
    word_index: dict[str, int] = field(init=False, repr=False, compare=False)
    char_index: dict[str, int] = field(init=False, repr=False, compare=False)
    tag_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chars[:2] != (PAD_CHAR, UNK_CHAR):
            raise DataFormatError(f"NerVocab.chars: expected {PAD_CHAR!r} and {UNK_CHAR!r} first, got {self.chars[:2]}")
        if not self.words:
            raise DataFormatError(
                f"NerVocab.words: no word occurs more than {self.threshold} times in the training sentences; lower "
                "the threshold or give more training data"
            )
        for name, items in (("word", self.words), ("char", self.chars), ("tag", self.tags)):
            index = {item: i for i, item in enumerate(items)}
            if len(index) != len(items):
                raise DataFormatError(f"NerVocab.{name}s: expected distinct entries, found duplicates")
            object.__setattr__(self, f"{name}_index", index)

    @staticmethod
    def from_sentences(sentences: Iterable[Sentence], threshold: int = FREQUENT_THRESHOLD) -> NerVocab:
        """Words seen more than ``threshold`` times (most frequent first, ties alphabetical), every character
        of every training word, and every tag (``O`` first, the rest sorted)."""
        counts: Counter[str] = Counter()
        tags: set[str] = set()
        for s in sentences:
            counts.update(s.tokens)
            tags.update(s.tags)
        frequent = sorted((w for w, c in counts.items() if c > threshold), key=lambda w: (-counts[w], w))
        chars = sorted({ch for word in counts for ch in word})
        ordered_tags = (["O"] if "O" in tags else []) + sorted(tags - {"O"})
        return NerVocab(tuple(frequent), (PAD_CHAR, UNK_CHAR, *chars), tuple(ordered_tags), threshold)

    def word_ids(self, word: str) -> list[int]:
        """One frequent-word id, or the bracketed character ids of a rare word (unknown characters -> 1)."""
        if word in self.word_index:
            return [self.word_index[word]]
        return [0, *(self.char_index.get(ch, 1) for ch in word), 0]

    def is_frequent(self, word: str) -> bool:
        return word in self.word_index


def sentence_batch(sentences: Sequence[Sentence], vocab: NerVocab) -> Batch:
    """One key: a bucket of sentences of equal length (one sentence is the paper's layout); module doc."""
    if not sentences:
        raise SettingError("sentences", "sentence_batch: expected at least one sentence")
    n, bucket = len(sentences[0]), len(sentences)
    if any(len(s) != n for s in sentences):
        raise DataFormatError(
            f"sentence_batch: a bucket holds sentences of equal length, got {[len(s) for s in sentences]}"
        )
    rows: list[tuple[int, int]] = []
    tags = np.empty(n * bucket, dtype=np.int64)
    for t in range(n):
        for b, sentence in enumerate(sentences):
            w = t * bucket + b
            rows.extend((w, i) for i in vocab.word_ids(sentence.tokens[t]))
            tag = sentence.tags[t]
            if tag not in vocab.tag_index:
                raise DataFormatError(
                    f"sentence_batch: tag {tag!r} (word {t} {sentence.tokens[t]!r}) is not among the training tags "
                    f"{list(vocab.tags)}; add a training sentence with it or map it to one of them"
                )
            tags[w] = vocab.tag_index[tag]
    words = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    return Batch({"words": words, "tags": tags}, size=bucket, fields={"length": n, "bucket": bucket})


def bucket_sentences(sentences: Sequence[Sentence], per_key: int) -> list[list[Sentence]]:
    """Sentences grouped by length into buckets of at most ``per_key``, in order of first appearance."""
    check_count("per_key", per_key, 1)
    by_length: dict[int, list[Sentence]] = {}
    for s in sentences:
        by_length.setdefault(len(s), []).append(s)
    buckets = []
    for group in by_length.values():
        buckets.extend(group[i : i + per_key] for i in range(0, len(group), per_key))
    return buckets


def ner_dataset(
    train: Sequence[Sentence],
    val: Sequence[Sentence],
    *,
    threshold: int = FREQUENT_THRESHOLD,
    per_key: int = 1,
    name: str = "ner",
    vocab: NerVocab | None = None,
) -> Dataset:
    """Keys for the tagger: the vocabulary comes from ``train`` (unless given); ``per_key`` sentences of equal
    length per key (1: one sentence per key, the paper's layout; validation keys likewise).

    ``meta`` holds what :func:`~amp_notebook.models.bilstm_tagger` needs: ``vocab_size`` (frequent words),
    ``char_vocab_size``, ``num_tags``, plus ``tags``, ``frequent_threshold``, ``per_key``, the token counts,
    the fraction of tokens that are rare (``rare_token_fraction``), that of validation tokens tagged ``O``
    (``val_majority_fraction``, the accuracy of always answering ``O``) and the vocabulary itself.
    """
    if not train:
        raise SettingError("train", "ner_dataset: expected at least one training sentence")
    vocab = vocab or NerVocab.from_sentences(train, threshold)
    train_keys = [sentence_batch(b, vocab) for b in bucket_sentences(train, per_key)]
    val_keys = [sentence_batch(b, vocab) for b in bucket_sentences(val, per_key)]
    tokens = [tok for s in train for tok in s.tokens]
    val_tags = [tag for s in val for tag in s.tags]
    meta: dict[str, object] = {
        "vocab_size": len(vocab.words),
        "char_vocab_size": len(vocab.chars),
        "num_tags": len(vocab.tags),
        "tags": list(vocab.tags),
        "frequent_threshold": vocab.threshold,
        "per_key": per_key,
        "train_tokens": len(tokens),
        "val_tokens": len(val_tags),
        "rare_token_fraction": sum(not vocab.is_frequent(t) for t in tokens) / len(tokens),
        "val_majority_fraction": (val_tags.count("O") / len(val_tags)) if val_tags else None,
        "vocab": vocab,
    }
    return Dataset(name, train_keys, val_keys, num_classes=len(vocab.tags), meta=meta)


# ------------------------------------------------------------------------------------------- CoNLL files
def read_conll(path: str | Path, check_tags: bool = True) -> list[Sentence]:
    """Sentences of a CoNLL-style file (module doc). ``check_tags`` requires IOB/IOBES tags (``O`` or
    ``B-``/``I-``/``E-``/``S-`` plus a type); every error names the file and the line."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataFileNotFoundError(
            f"{source}: no such file (expected a CoNLL-style file: one 'token tag' per line)"
        ) from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConllFormatError(source, line, f"expected UTF-8 text, found byte {exc.object[exc.start]:#04x}") from None
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            if tokens:
                sentences.append(Sentence(tuple(tokens), tuple(tags)))
                tokens, tags = [], []
            continue
        if line.startswith("-DOCSTART-"):
            continue
        parts = line.split()
        if len(parts) < 2:
            raise ConllFormatError(
                source, number, f"expected 'token tag' (two columns separated by whitespace), found {raw!r}"
            )
        tag = parts[-1]
        if check_tags and not TAG_PATTERN.fullmatch(tag):
            raise ConllFormatError(
                source, number,
                f"expected an IOB tag (O, or B-/I-/E-/S- and a type such as B-PER) in the last column, found "
                f"{tag!r}; pass check_tags=False to accept any tag",
            )  # fmt: skip
        tokens.append(parts[0])
        tags.append(tag)
    if tokens:
        sentences.append(Sentence(tuple(tokens), tuple(tags)))
    if not sentences:
        raise ConllFormatError(
            source, 1, "no sentences found (expected 'token tag' lines, a blank line between sentences)"
        )
    return sentences


def load_conll(
    path: str | Path,
    val_path: str | Path | None = None,
    *,
    val_fraction: float = 0.1,
    threshold: int = FREQUENT_THRESHOLD,
    per_key: int = 1,
    seed: int = 0,
    check_tags: bool = True,
) -> Dataset:
    """A tagger dataset from CoNLL-style files: training sentences from ``path``; validation from
    ``val_path``, or else a ``val_fraction`` of ``path``'s sentences held out (chosen by ``seed``).

    A validation tag that the training sentences lack is an error naming the file and the line."""
    train = read_conll(path, check_tags)
    if val_path is None:
        if not 0.0 <= val_fraction < 1.0:
            raise SettingError(
                "val_fraction", f"load_conll val_fraction: expected a fraction in [0, 1), got {val_fraction!r}"
            )
        order = np.random.default_rng(seed).permutation(len(train))
        n_val = round(val_fraction * len(train))
        held = set(order[:n_val].tolist())
        val = [s for i, s in enumerate(train) if i in held]
        train = [s for i, s in enumerate(train) if i not in held]
        if not train:
            raise SettingError(
                "val_fraction",
                f"{path}: {len(held)} sentence(s) held out for validation leave none to train on; lower "
                "val_fraction or pass val_path",
            )
    else:
        val = read_conll(val_path, check_tags)
        known = {tag for s in train for tag in s.tags}
        _check_val_tags(Path(val_path), val, known)
    return ner_dataset(train, val, threshold=threshold, per_key=per_key, name=Path(path).stem)


def _check_val_tags(path: Path, val: list[Sentence], known: set[str]) -> None:
    """Name the first line of ``path`` whose tag the training file never uses."""
    unknown = {tag for s in val for tag in s.tags} - known
    if not unknown:
        return
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = raw.split()
        if len(parts) >= 2 and parts[-1] in unknown:
            raise ConllFormatError(
                str(path), number,
                f"tag {parts[-1]!r} does not occur in the training file (its tags: {sorted(known)}); a tagger "
                "cannot predict a tag it never saw: add training sentences with it or map it to a known tag",
            )  # fmt: skip


def synthetic_ner_dataset(n_train: int = 2000, n_val: int = 500, seed: int = 0, per_key: int = 1) -> Dataset:
    """The embedded default: synthetic NER sentences (``data.ner_synthetic``) as tagger keys."""
    from amp_notebook.data.ner_synthetic import synthetic_ner_sentences

    train, val = synthetic_ner_sentences(n_train, n_val, seed=seed)
    return ner_dataset(train, val, per_key=per_key, name="synthetic_ner")
