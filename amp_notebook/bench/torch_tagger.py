"""The PyTorch peer of the BiLSTM tagger (``models.bilstm_tagger``): the same model, the same weights.

torch is a dev dependency: import this module lazily (the benchmark and the tests do).

The model is DyNet's ``bilstm-tagger-withchar`` as ``models.bilstm_tagger`` documents it: frequent words
looked up, rare words read by a bidirectional character LSTM (the last states of both directions side by
side), a bidirectional word LSTM, ``tanh(Linear)`` and a Linear to tag scores, softmax cross-entropy per
token. Here the LSTMs are ``torch.nn.LSTM`` modules whose weights are our graph's, transposed:
``weight_ih_l0`` = ``W.T`` of the forward half of 'char_input' / 'word_input', ``weight_ih_l0_reverse`` the
backward half, ``weight_hh_l0`` = ``'{char_,}fwd_h'.W.T``; the input Linear's bias is ``bias_ih`` and
``bias_hh`` is held at zero (frozen), so the two sides have the same parameters and the same function.

Two ways to run a batch of sentences (``data.ner.Sentence``-derived keys, see :func:`key_arrays`):

- :func:`eager_losses`: one sentence at a time, as DyNet runs it and as a PyTorch user writes it first: a
  Python loop over the sentence's rare words, each spelled through the character LSTM on its own, then the
  word LSTM over the sentence.
- :func:`batched_losses`: a minibatch at once: every rare word of the minibatch in one packed sequence
  through the character LSTM (``pack_sequence``), the sentences packed through the word LSTM, the MLP over
  every token of the minibatch in one call.

Both return each sentence's mean token loss and the logits of every token (sentence by sentence), so the
losses and gradients can be compared exactly (``tests/bench/test_torch_tagger.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

from amp_notebook.data.batch import Batch

Params = Mapping[str, Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence as the torch side reads it: per word, its ids (one word id, or bracketed char ids) and
    whether it is frequent; its tag ids."""

    word_ids: tuple[tuple[int, ...], ...]
    frequent: tuple[bool, ...]
    tags: torch.Tensor


def key_arrays(batch: Batch) -> list[TaggedSentence]:
    """The sentences of one tagger key (``data.ner.sentence_batch``): words ``w = t * bucket + b``."""
    n, bucket = int(batch.fields["length"]), int(batch.fields["bucket"])
    words = batch.inputs["words"]
    groups: dict[int, list[int]] = {}
    for w, i in words.tolist():
        groups.setdefault(w, []).append(i)
    tags = torch.as_tensor(batch.inputs["tags"])
    out = []
    for b in range(bucket):
        ids = tuple(tuple(groups[t * bucket + b]) for t in range(n))
        out.append(TaggedSentence(ids, tuple(len(i) == 1 for i in ids), tags[b::bucket].clone()))
    return out


def _lstm(input_size: int, hidden: int, dtype: torch.dtype) -> nn.LSTM:
    lstm = nn.LSTM(input_size, hidden, bidirectional=True, dtype=dtype)
    for name, p in lstm.named_parameters():
        if name.startswith("bias_hh"):
            with torch.no_grad():
                p.zero_()
            p.requires_grad_(False)  # one bias per gate, as our input Linear has
    return lstm


class TorchTagger(nn.Module):
    """Embeddings, the character and word BiLSTMs, the MLP and the output layer, loaded from our parameters."""

    def __init__(self, params: Params, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        word_dim = params["word_embed"]["E"].shape[1]
        char_dim = params["char_embed"]["E"].shape[1]
        hidden = params["fwd_h"]["W"].shape[0]
        self.char_hidden, self.hidden = params["char_fwd_h"]["W"].shape[0], hidden
        self.word_embed = nn.Parameter(torch.empty(params["word_embed"]["E"].shape, dtype=dtype))
        self.char_embed = nn.Parameter(torch.empty(params["char_embed"]["E"].shape, dtype=dtype))
        self.char_lstm = _lstm(char_dim, self.char_hidden, dtype)
        self.word_lstm = _lstm(word_dim, hidden, dtype)
        self.mlp = nn.Linear(2 * hidden, params["mlp"]["W"].shape[1], dtype=dtype)
        self.out = nn.Linear(params["mlp"]["W"].shape[1], params["tag_scores"]["W"].shape[1], dtype=dtype)
        self.load(params)

    def load(self, params: Params) -> None:
        """Copy a graph's parameters in (layout in the module doc)."""

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(a))

        with torch.no_grad():
            self.word_embed.copy_(t(params["word_embed"]["E"]))
            self.char_embed.copy_(t(params["char_embed"]["E"]))
            for lstm, prefix, size in ((self.char_lstm, "char_", self.char_hidden), (self.word_lstm, "", self.hidden)):
                inputs = params["char_input" if prefix else "word_input"]
                W, b = t(inputs["W"]), t(inputs["b"])
                lstm.weight_ih_l0.copy_(W[:, : 4 * size].T)
                lstm.weight_ih_l0_reverse.copy_(W[:, 4 * size :].T)
                lstm.bias_ih_l0.copy_(b[: 4 * size])
                lstm.bias_ih_l0_reverse.copy_(b[4 * size :])
                lstm.weight_hh_l0.copy_(t(params[f"{prefix}fwd_h"]["W"]).T)
                lstm.weight_hh_l0_reverse.copy_(t(params[f"{prefix}bwd_h"]["W"]).T)
            for layer, name in ((self.mlp, "mlp"), (self.out, "tag_scores")):
                layer.weight.copy_(t(params[name]["W"]).T)
                layer.bias.copy_(t(params[name]["b"]))

    def grads(self) -> dict[str, dict[str, np.ndarray]]:
        """The gradients held by the parameters, in our layout (node -> {"W", "b"} or {"E"})."""

        def g(p: torch.Tensor) -> np.ndarray:
            return np.zeros(tuple(p.shape)) if p.grad is None else p.grad.detach().numpy().copy()

        out: dict[str, dict[str, np.ndarray]] = {"word_embed": {"E": g(self.word_embed)},
                                                  "char_embed": {"E": g(self.char_embed)}}  # fmt: skip
        for lstm, prefix in ((self.char_lstm, "char_"), (self.word_lstm, "")):
            name = f"{prefix}input" if prefix else "word_input"
            out[name] = {
                "W": np.concatenate([g(lstm.weight_ih_l0).T, g(lstm.weight_ih_l0_reverse).T], axis=1),
                "b": np.concatenate([g(lstm.bias_ih_l0), g(lstm.bias_ih_l0_reverse)]),
            }
            out[f"{prefix}fwd_h"] = {"W": g(lstm.weight_hh_l0).T}
            out[f"{prefix}bwd_h"] = {"W": g(lstm.weight_hh_l0_reverse).T}
        for layer, name in ((self.mlp, "mlp"), (self.out, "tag_scores")):
            out[name] = {"W": g(layer.weight).T, "b": g(layer.bias)}
        return out

    def tag_logits(self, contexts: torch.Tensor) -> torch.Tensor:
        """[h_forward; h_backward] rows -> tag scores."""
        return self.out(torch.tanh(self.mlp(contexts)))

    def spell(self, chars: Sequence[Sequence[int]]) -> torch.Tensor:
        """Word vectors (k, word_dim) of k rare words from their bracketed char ids, all in one packed call."""
        seqs = [self.char_embed[torch.as_tensor(c)] for c in chars]
        _, (h, _) = self.char_lstm(pack_sequence(seqs, enforce_sorted=False))
        return torch.cat([h[0], h[1]], dim=1)  # the last state of each direction


def _word_vectors(model: TorchTagger, sentence: TaggedSentence, packed_chars: bool) -> torch.Tensor:
    rows: list[torch.Tensor] = []
    for ids, frequent in zip(sentence.word_ids, sentence.frequent, strict=True):
        if frequent:
            rows.append(model.word_embed[ids[0]])
        elif packed_chars:
            rows.append(model.spell([ids])[0])
        else:  # one word through the char BiLSTM as an unbatched (L, char_dim) sequence
            _, (h, _) = model.char_lstm(model.char_embed[torch.as_tensor(ids)])
            rows.append(torch.cat([h[0], h[1]]))
    return torch.stack(rows)


def eager_losses(model: TorchTagger, sentences: Sequence[TaggedSentence]) -> tuple[torch.Tensor, torch.Tensor]:
    """One sentence at a time (module doc): each sentence's mean token loss (S,), and every token's logits."""
    losses, all_logits = [], []
    for s in sentences:
        x = _word_vectors(model, s, packed_chars=False)
        contexts, _ = model.word_lstm(x)  # an unbatched (n, word_dim) sequence
        logits = model.tag_logits(contexts)
        losses.append(nn.functional.cross_entropy(logits, s.tags))
        all_logits.append(logits)
    return torch.stack(losses), torch.cat(all_logits)


def batched_losses(model: TorchTagger, sentences: Sequence[TaggedSentence]) -> tuple[torch.Tensor, torch.Tensor]:
    """A minibatch at once (module doc): each sentence's mean token loss (S,), and every token's logits."""
    rare = [ids for s in sentences for ids, f in zip(s.word_ids, s.frequent, strict=True) if not f]
    spelled = iter(model.spell(rare)) if rare else iter(())
    frequent_ids = torch.as_tensor(
        [ids[0] for s in sentences for ids, f in zip(s.word_ids, s.frequent, strict=True) if f]
    )
    looked_up = iter(model.word_embed[frequent_ids])
    seqs = [torch.stack([next(looked_up) if f else next(spelled) for f in s.frequent]) for s in sentences]
    out, lengths = pad_packed_sequence(model.word_lstm(pack_sequence(seqs, enforce_sorted=False))[0])
    contexts = torch.cat([out[: int(n), i] for i, n in enumerate(lengths)])
    logits = model.tag_logits(contexts)
    token_losses = nn.functional.cross_entropy(logits, torch.cat([s.tags for s in sentences]), reduction="none")
    per_sentence = torch.split(token_losses, [len(s.frequent) for s in sentences])
    return torch.stack([t.mean() for t in per_sentence]), logits
