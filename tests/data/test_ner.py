"""NER data for the BiLSTM tagger: the synthetic sentences, the frequent/rare split, the key layout, and the
CoNLL reader on small files written here (well-formed ones in two flavours, and malformed ones whose errors
must name the file and the line)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from amp_notebook.data.ner import (
    ConllFormatError,
    NerVocab,
    Sentence,
    bucket_sentences,
    load_conll,
    ner_dataset,
    read_conll,
    sentence_batch,
    synthetic_ner_dataset,
)
from amp_notebook.data.ner_synthetic import synthetic_ner_sentences


# ------------------------------------------------------------------------------------------- synthetic
def test_synthetic_sentences_are_deterministic_by_seed_and_differ_across_seeds() -> None:
    a, b, c = (synthetic_ner_sentences(40, 10, seed=s) for s in (3, 3, 4))
    assert a == b
    assert a != c


def test_synthetic_sentences_have_valid_iob_spans_of_capitalised_names() -> None:
    train, val = synthetic_ner_sentences(300, 50, seed=0)
    for s in train + val:
        previous = "O"
        for token, tag in zip(s.tokens, s.tags, strict=True):
            if tag.startswith("I-"):
                assert previous[2:] == tag[2:], f"{tag} after {previous} in {s}"
            if tag.startswith("B-"):
                assert previous == "O", "spans are separated by at least one O word"
            assert (tag != "O") == token[0].isupper(), token
            previous = tag
    tags = Counter(tag[2:] for s in train for tag in s.tags if tag != "O")
    assert set(tags) == {"PER", "LOC", "ORG", "MISC"}


def test_synthetic_dataset_has_rare_words_and_unseen_validation_words() -> None:
    data = synthetic_ner_dataset(n_train=600, n_val=100, seed=1)
    vocab: NerVocab = data.meta["vocab"]  # type: ignore[assignment]
    assert 0.1 < data.meta["rare_token_fraction"] < 0.4  # type: ignore[operator]
    assert 0.6 < data.meta["val_majority_fraction"] < 0.8  # type: ignore[operator]
    train, val = synthetic_ner_sentences(600, 100, seed=1)
    counts = Counter(t for s in train for t in s.tokens)
    assert all(counts[w] > 5 for w in vocab.words)
    assert {w for w, c in counts.items() if c > 5} == set(vocab.words)
    assert any(t not in counts for s in val for t in s.tokens), "validation has words never seen in training"
    assert data.meta["vocab_size"] == len(vocab.words) and data.meta["num_tags"] == data.num_classes == 8


# ------------------------------------------------------------------------------------------ vocabulary
SENTENCES = [
    Sentence(("the", "cat", "Zorbo"), ("O", "O", "B-PER")),
    Sentence(("the", "the", "cat"), ("O", "O", "O")),
    Sentence(("the", "dog", "Zé"), ("O", "O", "B-LOC")),
]


def test_vocab_splits_words_by_the_threshold_and_spells_the_rest() -> None:
    vocab = NerVocab.from_sentences(SENTENCES, threshold=1)  # "the" (4) and "cat" (2) are seen more than once
    assert vocab.words == ("the", "cat")
    assert vocab.tags == ("O", "B-LOC", "B-PER")
    assert vocab.chars[:2] == ("<*>", "<unk>")
    assert vocab.word_ids("cat") == [1]
    spelled = vocab.word_ids("dog")
    assert spelled[0] == spelled[-1] == 0 and [vocab.chars[i] for i in spelled[1:-1]] == ["d", "o", "g"]
    assert vocab.word_ids("dq")[2] == 1  # an unknown character
    with pytest.raises(ValueError, match="no word occurs more than 5 times"):
        NerVocab.from_sentences(SENTENCES)


def test_sentence_batch_layout_one_sentence_and_a_bucket() -> None:
    vocab = NerVocab.from_sentences(SENTENCES, threshold=1)
    one = sentence_batch([SENTENCES[0]], vocab)
    assert one.size == 1 and one.fields == {"length": 3, "bucket": 1}
    words = one.inputs["words"]
    assert words[:2].tolist() == [[0, 0], [1, 1]]  # "the", "cat": one id each
    assert words[2:, 0].tolist() == [2] * 7 and words[2:, 1].tolist()[0] == 0  # "Zorbo": <*> Z o r b o <*>
    assert one.inputs["tags"].tolist() == [0, 0, 2]
    pair = sentence_batch(SENTENCES[:2], vocab)
    assert pair.size == 2 and pair.fields == {"length": 3, "bucket": 2}
    by_word = {w: [i for v, i in pair.inputs["words"].tolist() if v == w] for w in range(6)}
    assert [by_word[w] for w in (0, 1, 2, 3)] == [[0], [0], [1], [0]]  # time-major: w = t * bucket + b
    assert pair.inputs["tags"].tolist() == [0, 0, 0, 0, 2, 0]
    with pytest.raises(ValueError, match="equal length"):
        sentence_batch([SENTENCES[0], Sentence(("a",), ("O",))], vocab)


def test_buckets_group_sentences_by_length() -> None:
    sentences = [Sentence(("w",) * n, ("O",) * n) for n in (3, 2, 3, 3, 2)]
    assert [[len(s) for s in b] for b in bucket_sentences(sentences, 2)] == [[3, 3], [3], [2, 2]]
    data = ner_dataset(SENTENCES, SENTENCES[:1], threshold=1, per_key=2)
    assert [b.size for b in data.train] == [2, 1] and data.meta["per_key"] == 2


# --------------------------------------------------------------------------------------------- CoNLL
TWO_COLUMNS = """\
Anna B-PER
Svenson I-PER
lives O
in O
Oslo B-LOC

the O
bank O
Nordbank B-ORG
"""

CONLL_2003 = """\
-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP B-PER
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_conll_two_columns_and_conll_2003(tmp_path: Path) -> None:
    first = read_conll(write(tmp_path, "two.conll", TWO_COLUMNS))
    assert [len(s) for s in first] == [5, 3]
    assert first[0].tokens[:2] == ("Anna", "Svenson") and first[0].tags[:2] == ("B-PER", "I-PER")
    second = read_conll(write(tmp_path, "eng.train", CONLL_2003))  # token first, tag last; DOCSTART skipped
    assert [s.tokens for s in second] == [("EU", "rejects", "German"), ("Peter",)]
    assert second[0].tags == ("B-ORG", "O", "B-MISC")


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("Anna B-PER\nSvenson\n", 2, "expected 'token tag'"),
        ("Anna B-PER\n\nOslo B_LOC\n", 3, "expected an IOB tag"),
        ("\n\n-DOCSTART- O\n\n", 1, "no sentences found"),
    ],
)
def test_read_conll_errors_name_the_file_and_the_line(tmp_path: Path, text: str, line: int, match: str) -> None:
    path = write(tmp_path, "bad.conll", text)
    with pytest.raises(ConllFormatError, match=match) as info:
        read_conll(path)
    assert info.value.line == line and str(info.value).startswith(f"{path}, line {line}: ")


def test_read_conll_rejects_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.conll"
    path.write_bytes("Anna B-PER\n\nZ\xe9 B-LOC\n".encode("latin-1"))
    with pytest.raises(ConllFormatError, match=r"line 3: expected UTF-8 text, found byte 0xe9"):
        read_conll(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_conll(tmp_path / "missing.conll")
    assert read_conll(write(tmp_path, "any.conll", "a FOO\n"), check_tags=False)[0].tags == ("FOO",)


def test_load_conll_holds_out_validation_or_reads_a_second_file(tmp_path: Path) -> None:
    lines = "".join(f"the O\nman O\nZorbo{i % 4} B-PER\n\n" for i in range(20))
    train_path = write(tmp_path, "train.conll", lines)
    data = load_conll(train_path, val_fraction=0.25, seed=0)
    assert len(data.train) == 15 and len(data.val) == 5 and data.meta["vocab_size"] == 2  # "the", "man"
    assert data.name == "train" and data.meta["tags"] == ["O", "B-PER"]
    val_path = write(tmp_path, "val.conll", "the O\nOslo B-LOC\n")
    with pytest.raises(ConllFormatError, match=r"val.conll, line 2: tag 'B-LOC' does not occur in the training"):
        load_conll(train_path, val_path)
    data = load_conll(train_path, write(tmp_path, "val2.conll", "the O\nBergen B-PER\n"), per_key=4)
    assert len(data.val) == 1 and sum(b.size for b in data.train) == 20
    assert np.array_equal(data.val[0].inputs["tags"], [0, 1])
