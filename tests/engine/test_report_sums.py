"""The driver folds loss reports on the engine's side (``src/reports.h``) exactly as ``Session.add_reports``
adds them in Python: the same sums per side and the same moving averages, bit for bit, report by report in
the order handed over, from any totals so far; and ``Session.fold_reports`` leaves the session as
``add_reports`` leaves it."""

from __future__ import annotations

import types

import numpy as np
import pytest

from amp_notebook.engine import _native
from amp_notebook.runtime.session import RECENT_DECAY, EpochStats, Session


def columns(rng: np.random.Generator, n: int, sides: str) -> tuple[list, list, list, list]:
    trains = [bool(t) for t in rng.integers(0, 2, n)] if sides == "mixed" else [sides == "train"] * n
    losses = [float(x) for x in rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)]
    ns = [int(x) for x in rng.integers(0, 40, n)]  # 0 too: no accuracy from it, its loss counts nothing
    corrects = [int(min(c, k)) if rng.random() < 0.7 else -1 for c, k in zip(rng.integers(0, 40, n), ns, strict=True)]
    return trains, losses, ns, corrects


def python_session(start: EpochStats, recent: tuple[float | None, float | None], trains: list[bool]):
    """What add_reports reads and writes on a session, with each report's key on its side."""
    return types.SimpleNamespace(
        current=start, recent_loss=recent[0], recent_accuracy=recent[1],
        key_epoch={k: (0, t) for k, t in enumerate(trains)},
    )  # fmt: skip


def started(rng: np.random.Generator, counted: bool) -> EpochStats:
    stats = EpochStats(0)
    if counted:  # sums so far, one side with a correct count and one without
        stats._sums.update({"train_n": 17, "train_loss": float(rng.standard_normal()), "train_correct": 5,
                            "val_n": 3, "val_loss": float(rng.standard_normal())})  # fmt: skip
    return stats


@pytest.mark.parametrize("sides", ["mixed", "train", "val"])
@pytest.mark.parametrize("counted", [False, True])
def test_the_native_fold_adds_reports_as_add_reports_does(sides: str, counted: bool) -> None:
    rng = np.random.default_rng(7 + counted)
    for chunk in range(5):
        trains, losses, ns, corrects = columns(rng, int(rng.integers(1, 60)), sides)
        recent = (None, None) if not counted else (float(rng.standard_normal()), 0.25)
        expected = python_session(started(np.random.default_rng(chunk), counted), recent, trains)
        Session.add_reports(expected, list(range(len(trains))), losses, ns, corrects)  # type: ignore[arg-type]

        mine = python_session(started(np.random.default_rng(chunk), counted), recent, trains)
        reports = (trains, losses, ns, corrects)
        Session.fold_reports(mine, lambda decay, totals, r=reports: _native.fold_report_columns(*r, decay, totals))  # type: ignore[arg-type]
        assert mine.current._sums == expected.current._sums, f"chunk {chunk}"  # the same keys, the same bits
        assert (mine.recent_loss, mine.recent_accuracy) == (expected.recent_loss, expected.recent_accuracy)


def test_a_side_with_no_report_and_a_correct_count_never_given_stay_absent() -> None:
    nothing = ((0, 0.0, None), (0, 0.0, None), None, None)
    out = _native.fold_report_columns([True], [0.5], [4], [-1], RECENT_DECAY, nothing)
    assert out == ((4, 2.0, None), None, 0.5, None)
    stats = EpochStats(0)
    stats.set_side_sums(out[:2])
    assert stats._sums == {"train_n": 4, "train_loss": 2.0}  # as add_many leaves them


def test_bad_totals_are_refused_with_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"totals are \(train, val, recent_loss, recent_accuracy\)"):
        _native.fold_report_columns([True], [0.5], [4], [-1], RECENT_DECAY, ((0, 0.0, None),))
    with pytest.raises(ValueError, match=r"a side's sums are \(n, loss, correct or None\)"):
        _native.fold_report_columns([True], [0.5], [4], [-1], RECENT_DECAY, ((0, 0.0), (0, 0.0, None), None, None))
    with pytest.raises(ValueError, match=r"decay is a weight in \[0, 1\]"):
        _native.fold_report_columns([True], [0.5], [4], [-1], 1.5, ((0, 0.0, None), (0, 0.0, None), None, None))
    with pytest.raises(ValueError, match="columns of equal length"):
        _native.fold_report_columns([True, False], [0.5], [4], [-1], RECENT_DECAY, ((0, 0.0, None),) * 2 + (None, None))
