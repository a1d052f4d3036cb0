"""Loss reports into an epoch's metrics: handed over one at a time or as columns, the sums are the same."""

from __future__ import annotations

import numpy as np

from amp_notebook.runtime.session import EpochStats


def test_reports_as_columns_sum_as_one_by_one() -> None:
    rng = np.random.default_rng(0)
    n = 50
    trains = [bool(t) for t in rng.integers(0, 2, n)]
    losses = [float(x) for x in rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, n)]  # sums that round
    ns = [int(k) for k in rng.integers(0, 30, n)]
    corrects = [int(c) if i % 3 else -1 for i, c in enumerate(rng.integers(0, 30, n))]
    one_by_one, columns, halves = EpochStats(0), EpochStats(0), EpochStats(0)
    for t, loss, k, c in zip(trains, losses, ns, corrects, strict=True):
        report = {"key": 0, "loss": loss, "n": k, **({"correct": c} if c >= 0 else {})}
        one_by_one.add(t, report)
    columns.add_many(trains, losses, ns, corrects)
    halves.add_many(trains[:20], losses[:20], ns[:20], corrects[:20])
    halves.add_many(trains[20:], losses[20:], ns[20:], corrects[20:])
    for stats in (columns, halves):
        assert stats._sums == one_by_one._sums  # bit for bit: the same additions in the same order
        stats.finish(1.0)
    one_by_one.finish(1.0)
    assert columns.as_dict() == one_by_one.as_dict() == halves.as_dict()
    assert one_by_one.train_accuracy is not None and one_by_one.val_accuracy is not None


def test_a_side_without_counted_predictions_has_no_accuracy() -> None:
    stats = EpochStats(0)
    stats.add_many([True, True, False], [1.0, 3.0, 2.0], [2, 2, 4], [-1, -1, 3])
    stats.finish(1.0)
    assert stats.train_loss == 2.0 and stats.train_accuracy is None and stats.train_instances == 4
    assert stats.val_loss == 2.0 and stats.val_accuracy == 0.75
