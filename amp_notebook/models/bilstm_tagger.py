"""The BiLSTM tagger with a character model: the DyNet benchmark model the AMPNet paper ran on Wikiner.

The model (DyNet's ``bilstm-tagger-withchar``)
----------------------------------------------
A word seen more than 5 times in training is looked up in a word embedding (``word_dim``, 128); any other
word is spelled out: its characters, bracketed by the pad character ``<*>``, are embedded (``char_dim``,
20) and read by a forward and a backward character LSTM (``word_dim / 2`` = 64 each), whose last states
side by side are the word's vector. A word-level bidirectional LSTM (``hidden``, 50 each way) reads the
sentence's word vectors; at each position ``[h_forward; h_backward]`` goes through ``tanh(Linear)``
(``mlp_hidden``, 32) and a Linear to the tag scores, and the loss is the softmax cross-entropy per token,
averaged over the key's tokens (so ``val_accuracy`` is token accuracy).

How one static graph tags every sentence
----------------------------------------
A key is one sentence, or a bucket of B sentences of one length n (``data.ner``: word ``w = t * B + b``;
B = 1 is the paper's layout). Its ``words`` table holds, for each word, one row ``[w, id]`` per id: one
frequent-word id, or the bracketed character ids of a rare word::

    words (ids, 2) -> Partition 'word_ids' (field w, size_field ids: one message (ids,) per word)
      -> Distribute 'by_frequency' on ``0 if ids == 1 else 1``
           b0 (frequent): Embedding 'word_embed'                               -> (1, word_dim)
           b1 (rare):     Embedding 'char_embed' -> Linear 'char_input' (both directions' input gates)
                          -> Split -> Ungroup 'char_fwd_rows' / 'char_bwd_rows' (chunk 1, counter c;
                             the backward copy reversed by Isu ``c -> ids - 1 - c``)
                          -> LSTM loops 'char_fwd' / 'char_bwd' (last state only, exit Isu drops c)
                          -> Concat 'char_final' -> Split: [h_fwd; h_bwd] -> Concat 'char_word'
                                                            c_fwd, c_bwd -> Discard  -> (1, word_dim)
      -> Phi 'word_vectors' -> Collect 'sentence' (index w, count ``length * bucket``, rows stacked,
         drops w and ids): the sentence put back together, (n B, word_dim) time-major
      -> Linear 'word_input' (both directions' input gates for every word at once) -> Split
      -> Ungroup 'fwd_rows' / 'bwd_rows' (chunk ``bucket``, counter t; the backward copy reversed by
         Isu ``t -> length - 1 - t``) -> LSTM loops 'fwd' / 'bwd' (every step's state out; the backward
         loop's outputs reversed back) -> Concat 'steps' -> Collect 'outputs' (index t, count length)
      -> Split: [h_fwd; h_bwd] -> Concat 'h' -> Linear 'mlp' -> Tanh -> Linear 'tag_scores'
      -> SoftmaxCrossEntropy 'loss' against ``tags`` (n B,)

Each LSTM loop is :func:`amp_notebook.ir.cells.lstm_loop`: the input projections ``x @ W_x + b`` of every
step come from one Linear before the loop (as cuDNN does), and inside the loop only ``h @ W_h`` and the
fused gate update (LSTMStart on step 0, LSTMUpdate after) run per step.

Weights (each Linear holds W (in, out) = torch ``weight.T``; gates in torch.nn.LSTM's order i, f, g, o):
'word_embed' E (vocab, word_dim); 'char_embed' E (chars, char_dim); 'char_input' W (char_dim, 8 Hc), b:
[forward LSTM's weight_ih.T | backward's], biases ``bias_ih + bias_hh``; 'char_fwd_h', 'char_bwd_h' W (Hc,
4 Hc) = ``weight_hh.T``; 'word_input' W (word_dim, 8 hidden), b; 'fwd_h', 'bwd_h' W (hidden, 4 hidden);
'mlp' W (2 hidden, mlp_hidden), b; 'tag_scores' W (mlp_hidden, tags), b.
"""

from __future__ import annotations

from collections.abc import Mapping

from amp_notebook.ir.cells import lstm_loop
from amp_notebook.ir.graph import Graph, GraphError, Ref

# Gradients a node holds before it updates (amp mode), about one sentence's worth: a recurrent Linear gets one
# gradient per step (the character ones about 40 per sentence, the word ones one per word), the word
# embedding one per frequent word, the character input layers one per rare word, the rest one per sentence.
# Updating after every step's gradient instead trains worse (Adam takes a full step on each partial
# gradient) and slower (an update costs more than the step).
UPDATE_FREQUENCY: dict[str, int] = {
    "char_fwd_h": 20, "char_bwd_h": 20, "fwd_h": 10, "bwd_h": 10, "word_embed": 10, "char_embed": 4, "char_input": 4,
}  # fmt: skip


def _h_halves(g: Graph, hc_pair: Ref, hidden: int, name: str) -> Ref:
    """[h_a; c_a; h_b; c_b] -> [h_a; h_b] (the memory cells are not read further)."""
    h_a, c_a, h_b, c_b = g.split(hc_pair, [hidden] * 4, name=f"{name}_split")
    g.discard(c_a, name=f"{name}_drop_c0")
    g.discard(c_b, name=f"{name}_drop_c1")
    return g.concat(h_a, h_b, name=name)


def bilstm_tagger(
    vocab_size: int,
    char_vocab_size: int,
    num_tags: int,
    word_dim: int = 128,
    char_dim: int = 20,
    hidden: int = 50,
    mlp_hidden: int = 32,
    *,
    update_frequency: Mapping[str, int] | None = UPDATE_FREQUENCY,
) -> Graph:
    """The BiLSTM tagger with a character model (module doc); sizes default to DyNet's benchmark. Inputs
    ``words`` and ``tags`` and the fields ``length`` and ``bucket`` as :mod:`amp_notebook.data.ner` builds
    them: ``bilstm_tagger(d.meta["vocab_size"], d.meta["char_vocab_size"], d.meta["num_tags"])``.

    ``update_frequency`` sets nodes' ``min_update_frequency`` (amp mode; :data:`UPDATE_FREQUENCY`: about a
    sentence's worth of gradients each); nodes it does not name, or all with ``None``, use the run's value."""
    for what, value in (
        ("vocab_size", vocab_size), ("char_vocab_size", char_vocab_size), ("num_tags", num_tags),
        ("word_dim", word_dim), ("char_dim", char_dim), ("hidden", hidden), ("mlp_hidden", mlp_hidden),
    ):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphError(f"bilstm_tagger {what}: expected a positive int, got {value!r}")
    if word_dim % 2:
        raise GraphError(
            f"bilstm_tagger word_dim: expected an even width (a rare word's vector is two character LSTM states "
            f"of word_dim / 2 side by side), got {word_dim}"
        )
    char_hidden = word_dim // 2
    g = Graph("bilstm_tagger")
    words = g.partition(g.input("words", dtype="int"), "w", keep_2d=False, name="word_ids", size_field="ids")
    frequent, rare = g.distribute(words, "0 if ids == 1 else 1", 2, name="by_frequency")
    looked_up = g.embedding(frequent, vocab_size, word_dim, name="word_embed")

    chars = g.embedding(rare, char_vocab_size, char_dim, name="char_embed")
    char_gates = g.linear(chars, 8 * char_hidden, name="char_input", in_features=char_dim)
    fwd_gates, bwd_gates = g.split(char_gates, [4 * char_hidden] * 2, name="char_gates")
    fwd_rows = g.ungroup(fwd_gates, "c", name="char_fwd_rows", chunk=1)
    bwd_rows = g.ungroup(bwd_gates, "c", name="char_bwd_rows", chunk=1)
    bwd_rows = g.isu(bwd_rows, {"c": "ids - 1 - c"}, {"c": "ids - 1 - c"}, name="char_bwd_reverse")
    ends = []
    for direction, rows in (("fwd", fwd_rows), ("bwd", bwd_rows)):
        final = lstm_loop(g, rows, char_hidden, f"char_{direction}", "c", "ids - 1", every_step=False)
        ends.append(g.isu(final, {"c": None}, {"c": "ids - 1"}, name=f"char_{direction}_done"))
    spelled = _h_halves(g, g.concat(*ends, name="char_final"), char_hidden, "char_word")

    vectors = g.phi(looked_up, spelled, name="word_vectors")
    sentence = g.collect(vectors, "0", "w", "length * bucket", None, name="sentence", axis=0, drop=["w", "ids"])
    gates = g.linear(sentence, 8 * hidden, name="word_input", in_features=word_dim)
    fwd_gates, bwd_gates = g.split(gates, [4 * hidden] * 2, name="word_gates")
    fwd_rows = g.ungroup(fwd_gates, "t", name="fwd_rows", chunk="bucket")
    bwd_rows = g.ungroup(bwd_gates, "t", name="bwd_rows", chunk="bucket")
    bwd_rows = g.isu(bwd_rows, {"t": "length - 1 - t"}, {"t": "length - 1 - t"}, name="bwd_reverse")
    fwd = lstm_loop(g, fwd_rows, hidden, "fwd", "t", "length - 1", every_step=True)
    bwd = lstm_loop(g, bwd_rows, hidden, "bwd", "t", "length - 1", every_step=True)
    bwd = g.isu(bwd, {"t": "length - 1 - t"}, {"t": "length - 1 - t"}, name="bwd_unreverse")
    steps = g.collect(g.concat(fwd, bwd, name="steps"), "0", "t", "length", None, name="outputs", axis=0, drop=["t"])

    h = _h_halves(g, steps, hidden, "h")
    scores = g.linear(g.tanh(g.linear(h, mlp_hidden, name="mlp"), name="mlp_tanh"), num_tags, name="tag_scores")
    g.softmax_cross_entropy(scores, g.input("tags", dtype="int"), name="loss")
    for name, frequency in (update_frequency or {}).items():
        if name not in g.nodes or g.nodes[name].kind not in ("linear", "embedding"):
            raise GraphError(f"bilstm_tagger update_frequency: {name!r} is not a parameterized node of the tagger")
        g.nodes[name].min_update_frequency = frequency
    return g
