"""The paper's figures as data: the ratios it implies are the ones the paper's text lists, and every row of
its tables is one ``reproduce`` runs."""

from __future__ import annotations

import pytest

from amp_notebook.reproduce import paper
from amp_notebook.reproduce.table1 import MODELS as TABLE1_MODELS
from amp_notebook.reproduce.workloads import MODELS

# the ratios to max_active_keys 1 as the paper lists them (two decimals), by (model, max_active_keys)
LISTED_RATIOS = {
    ("mlp", 4): 3.02,
    ("rnn", 4): 1.23, ("rnn", 16): 1.23, ("rnn-2-replicas", 4): 2.69, ("rnn-4-replicas", 8): 5.46,
    ("tree-lstm", 4): 1.84, ("tree-lstm", 16): 2.53,
    ("ggsnn", 4): 3.33, ("ggsnn", 16): 5.95,
    ("bilstm-tagger", 4): 2.10, ("bilstm-tagger", 32): 3.17,
}  # fmt: skip


@pytest.mark.parametrize(("model", "mak"), sorted(LISTED_RATIOS))
def test_ratios_recomputed_from_the_throughputs_are_the_listed_ones(model: str, mak: int) -> None:
    assert round(paper.ratio(model, mak), 2) == LISTED_RATIOS[(model, mak)]  # type: ignore[arg-type]


def test_every_row_of_table2_has_a_ratio_and_no_other_row_does() -> None:
    listed = {(r.model, r.mak) for r in paper.TABLE2 if r.mak != 1 or r.model in paper.FAMILY_BASE}
    assert listed == set(LISTED_RATIOS)
    assert all(paper.ratio(r.model, r.mak) == 1.0 for r in paper.TABLE2 if r.mak == 1)
    assert paper.ratio("mlp", 16) is None and paper.ratio("lstm", 1) is None


def test_the_rows_follow_the_papers_layout() -> None:
    assert {m: paper.table2_keys(m) for m in MODELS} == {
        "mlp": (1, 4), "rnn": (1, 4, 16), "rnn-2-replicas": (4,), "rnn-4-replicas": (8,), "tree-lstm": (1, 4, 16),
        "ggsnn": (1, 4, 16), "bilstm-tagger": (1, 4, 32),
    }  # fmt: skip
    assert {m: paper.table1_keys(m) for m in TABLE1_MODELS} == {
        "mlp": (1, 4), "rnn": (1, 4, 16), "rnn-2-replicas": (4,), "rnn-4-replicas": (8,), "tree-lstm": (1, 8, 16),
        "ggsnn": (4, 16),
    }  # fmt: skip
    assert {r.model for r in paper.TABLE1} == set(TABLE1_MODELS) and {r.model for r in paper.TABLE2} == set(MODELS)


def test_table1_speedups_match_the_papers_parentheses() -> None:
    """Table 1 prints each time's speedup over max_active_keys 1 in parentheses: 2.2x, 1.2x, 1.3x, 2x, 3.8x,
    2.3x, 1.8x (from unrounded times: 78 s / 21 s is 3.7, printed 3.8)."""
    quoted = {("mlp", 4): 2.2, ("rnn", 4): 1.2, ("rnn", 16): 1.3, ("rnn-2-replicas", 4): 2.0,
              ("rnn-4-replicas", 8): 3.8, ("tree-lstm", 8): 2.3, ("tree-lstm", 16): 1.8}  # fmt: skip
    for (model, mak), speedup in quoted.items():
        base = paper.table1_row(paper.FAMILY_BASE.get(model, model), 1)
        row = paper.table1_row(model, mak)
        assert base is not None and row is not None and row.time_s is not None and base.time_s is not None
        assert base.time_s / row.time_s == pytest.approx(speedup, abs=0.1)
