"""The BiLSTM tagger with a character model (``models.bilstm_tagger``).

Its loss and every parameter's gradient equal PyTorch autograd on the same weights in float64 (a direct
torch re-statement of the model, written out word by word here), for one sentence per key and for buckets
of sentences; the threaded runtime in sync mode equals the reference interpreter; and a short asynchronous
run learns the synthetic NER task (``test_defaults_learn.py``, slow tier).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.data.ner import (
    NerVocab,
    Sentence,
    bucket_sentences,
    ner_dataset,
    sentence_batch,
)
from amp_notebook.data.ner_synthetic import synthetic_ner_sentences
from amp_notebook.ir.graph import GraphError
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import bilstm_tagger
from tests.models.test_models_dynamic import train_both

SIZES = {"word_dim": 6, "char_dim": 3, "hidden": 4, "mlp_hidden": 5}
T = dict[str, dict[str, torch.Tensor]]


def lstm_direction(xs: list[torch.Tensor], W: torch.Tensor, b: torch.Tensor, W_h: torch.Tensor) -> list[torch.Tensor]:
    """[h; c] after each input of ``xs`` in order, from the zero state (our layout: W (in, 4H), gates i, f, g, o)."""
    H = W_h.shape[0]
    h = c = torch.zeros(H, dtype=torch.float64)
    out = []
    for x in xs:
        i, f, g, o = (x @ W + b + h @ W_h).split(H)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(torch.cat([h, c]))
    return out


def torch_sentence_loss(sentence: Sentence, vocab: NerVocab, p: T) -> torch.Tensor:
    """The mean token loss of one sentence, DyNet's model written out with the graph's weights."""
    Hc, H = p["char_fwd_h"]["W"].shape[0], p["fwd_h"]["W"].shape[0]
    vectors = []
    for word in sentence.tokens:
        ids = vocab.word_ids(word)
        if vocab.is_frequent(word):
            vectors.append(p["word_embed"]["E"][ids[0]])
            continue
        chars = [p["char_embed"]["E"][i] for i in ids]
        W, b = p["char_input"]["W"], p["char_input"]["b"]
        fwd = lstm_direction(chars, W[:, : 4 * Hc], b[: 4 * Hc], p["char_fwd_h"]["W"])[-1]
        bwd = lstm_direction(chars[::-1], W[:, 4 * Hc :], b[4 * Hc :], p["char_bwd_h"]["W"])[-1]
        vectors.append(torch.cat([fwd[:Hc], bwd[:Hc]]))
    W, b = p["word_input"]["W"], p["word_input"]["b"]
    fwd = lstm_direction(vectors, W[:, : 4 * H], b[: 4 * H], p["fwd_h"]["W"])
    bwd = lstm_direction(vectors[::-1], W[:, 4 * H :], b[4 * H :], p["bwd_h"]["W"])[::-1]
    contexts = torch.stack([torch.cat([f[:H], r[:H]]) for f, r in zip(fwd, bwd, strict=True)])
    hidden = torch.tanh(contexts @ p["mlp"]["W"] + p["mlp"]["b"])
    logits = hidden @ p["tag_scores"]["W"] + p["tag_scores"]["b"]
    tags = torch.tensor([vocab.tag_index[t] for t in sentence.tags])
    return torch.nn.functional.cross_entropy(logits, tags)


@pytest.fixture(scope="module")
def sentences() -> tuple[list[Sentence], NerVocab]:
    train, _ = synthetic_ner_sentences(60, 0, seed=7)
    vocab = NerVocab.from_sentences(train)
    return train, vocab


def test_graph_validates_with_the_documented_weights() -> None:
    g = bilstm_tagger(30, 12, 9)  # DyNet's sizes
    g.validate(require_loss=True)
    params = g.init_params(0)
    shapes = {n: {k: v.shape for k, v in group.items()} for n, group in params.items()}
    assert shapes == {
        "word_embed": {"E": (30, 128)}, "char_embed": {"E": (12, 20)},
        "char_input": {"W": (20, 512), "b": (512,)}, "char_fwd_h": {"W": (64, 256)}, "char_bwd_h": {"W": (64, 256)},
        "word_input": {"W": (128, 400), "b": (400,)}, "fwd_h": {"W": (50, 200)}, "bwd_h": {"W": (50, 200)},
        "mlp": {"W": (100, 32), "b": (32,)}, "tag_scores": {"W": (32, 9), "b": (9,)},
    }  # fmt: skip
    kinds = {g.nodes[n].kind for n in ("by_frequency", "sentence", "outputs", "fwd_start", "fwd_update")}
    assert kinds == {"distribute", "collect", "lstm_start", "lstm_update"}
    with pytest.raises(GraphError, match="word_dim: expected an even width"):
        bilstm_tagger(30, 12, 9, word_dim=7)
    with pytest.raises(GraphError, match="num_tags: expected a positive int"):
        bilstm_tagger(30, 12, 0)


@pytest.mark.parametrize("per_key", [1, 3])
def test_loss_and_gradients_equal_torch(sentences: tuple[list[Sentence], NerVocab], per_key: int) -> None:
    train, vocab = sentences
    # the two shortest keys of the wanted size (torch's word-by-word reference is slow on long ones)
    buckets = sorted((b for b in bucket_sentences(train, per_key) if len(b) == per_key), key=lambda b: len(b[0]))[:2]
    assert len(buckets) == 2
    graph = bilstm_tagger(len(vocab.words), len(vocab.chars), len(vocab.tags), **SIZES)
    interp = Interpreter(graph, seed=3, dtype=np.float64)
    rare_seen = 0
    for k, members in enumerate(buckets):
        batch = sentence_batch(members, vocab)
        grads = interp.gradients(batch, key=k)  # the interpreter checks its invariants as it goes
        for ctx in interp.contexts:
            assert not ctx.cache and not ctx.joins
        (report,) = interp.run_key(batch, key=100 + k, train=False)
        p = {
            n: {name: torch.tensor(v, requires_grad=True) for name, v in g.items()} for n, g in interp.params().items()
        }
        loss = torch.stack([torch_sentence_loss(s, vocab, p) for s in members]).mean()  # equal lengths: token mean
        assert loss.item() == pytest.approx(report["loss"], rel=1e-10)
        loss.backward()
        for node, group in grads.items():
            for name, grad in group.items():
                expected = p[node][name].grad
                expected_np = np.zeros_like(grad) if expected is None else expected.numpy()
                np.testing.assert_allclose(grad, expected_np, rtol=1e-6, atol=1e-12, err_msg=f"{node}.{name}")
        rare_seen += any(not vocab.is_frequent(w) for s in members for w in s.tokens)
    assert rare_seen, "no key spelled a rare word: the character model went untested"


def test_sync_runtime_equals_the_interpreter() -> None:
    sentences, _ = synthetic_ner_sentences(40, 0, seed=2)
    data = ner_dataset(sentences[:8], sentences[8:10], vocab=NerVocab.from_sentences(sentences))
    sizes = {k: int(data.meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}  # type: ignore[call-overload]
    train_both(bilstm_tagger(**sizes, **SIZES), data)
