"""The PyTorch peer of the BiLSTM tagger computes what it claims (float64, no timings).

Loaded with our graph's parameters, the eager (one sentence at a time) and the batched (packed minibatch)
torch models give our reference interpreter's loss and gradients, for one sentence per key and for buckets,
so the benchmark compares one model implemented three ways.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.bench import torch_tagger as tt
from amp_notebook.data.ner import synthetic_ner_dataset
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import bilstm_tagger

SIZES = {"word_dim": 6, "char_dim": 3, "hidden": 4, "mlp_hidden": 5}


@pytest.mark.parametrize("per_key", [1, 3])
@pytest.mark.parametrize("losses_of", [tt.eager_losses, tt.batched_losses], ids=["eager", "batched"])
def test_torch_tagger_equals_the_interpreter(per_key: int, losses_of: object) -> None:
    data = synthetic_ner_dataset(n_train=50, n_val=0, seed=5, per_key=per_key)
    sizes = {k: int(data.meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}  # type: ignore[call-overload]
    interp = Interpreter(bilstm_tagger(**sizes, **SIZES), seed=2, dtype=np.float64)
    keys = sorted((b for b in data.train if b.size == per_key), key=lambda b: b.fields["length"])[:2]
    for k, batch in enumerate(keys):
        grads = interp.gradients(batch, key=k)
        (report,) = interp.run_key(batch, key=10 + k, train=False)
        model = tt.TorchTagger(interp.params(), dtype=torch.float64)
        sentences = tt.key_arrays(batch)
        assert len(sentences) == per_key and all(len(s.frequent) == batch.fields["length"] for s in sentences)
        losses, logits = losses_of(model, sentences)  # type: ignore[operator]
        assert logits.shape == (batch.fields["length"] * per_key, sizes["num_tags"])
        loss = losses.mean()  # sentences of equal length: the mean of means is the key's token mean
        assert loss.item() == pytest.approx(report["loss"], rel=1e-10)
        loss.backward()
        for node, group in model.grads().items():
            for name, expected in group.items():
                np.testing.assert_allclose(grads[node][name], expected, rtol=1e-6, atol=1e-12, err_msg=f"{node}.{name}")
